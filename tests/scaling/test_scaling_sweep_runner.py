"""examples/dim_sweep.py end to end on a tiny random model and a toy two-dataset BEIR folder (seconds)."""

from __future__ import annotations

import csv
import json
import math
import random
from pathlib import Path

import pytest
from helpers.scripts import load_script

from tests.conftest import WORDS, build_tiny_st

ROOT = Path(__file__).resolve().parents[2]


def _load_runner():
    return load_script("examples/dim_sweep.py")


def _write_beir(folder: Path, splits: tuple[str, ...], seed: int) -> None:
    rng = random.Random(seed)
    (folder / "qrels").mkdir(parents=True)
    with open(folder / "corpus.jsonl", "w") as fh:
        for i in range(40):
            text = " ".join(rng.choice(WORDS) for _ in range(8))
            fh.write(json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n")
    with open(folder / "queries.jsonl", "w") as fh:
        for i in range(12):
            fh.write(json.dumps({"_id": f"q{i}", "text": " ".join(rng.choice(WORDS) for _ in range(3))}) + "\n")
    for split in splits:
        qids = range(0, 8) if split == "train" else range(8, 12)
        with open(folder / "qrels" / f"{split}.tsv", "w", newline="") as fh:
            fh.write("query-id\tcorpus-id\tscore\r\n")
            for q in qids:
                for d in rng.sample(range(40), 2):
                    fh.write(f"q{q}\td{d}\t{rng.choice([1, 2])}\r\n")


@pytest.mark.parametrize("recipe", ["bert", "ettin"])
def test_sweep_runner_writes_rows(tiny_bert_dir, tmp_path, recipe):
    model_dir = tmp_path / "model"
    build_tiny_st(tiny_bert_dir, normalize=True).save(str(model_dir))
    _write_beir(tmp_path / "beir" / "nfcorpus", ("train", "test"), seed=0)
    _write_beir(tmp_path / "beir" / "scifact", ("test",), seed=1)
    runner = _load_runner()
    args = ["--model", str(model_dir), "--data", str(tmp_path / "beir"), "--recipe", recipe, "--dims", "8", "16",
            "--steps", "2", "--batch-size", "3", "--negatives", "1", "--neg-pool", "4", "--ce-negatives", "10",
            "--max-seq-length", "16", "--device", "cpu", "--out", str(tmp_path / "out")]  # fmt: skip
    assert runner.main(args) == 0
    with open(tmp_path / "out" / "sweep.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["dim"], r["dataset"]) for r in rows] == [
        ("8", "nfcorpus"), ("8", "scifact"), ("16", "nfcorpus"), ("16", "scifact")
    ]  # fmt: skip
    for r in rows:
        assert r["recipe"] == recipe and float(r["n_params_m"]) > 0
        assert math.isfinite(float(r["contrastive_entropy"])) and float(r["contrastive_entropy"]) > 0
        assert 0 <= float(r["ndcg@10"]) <= 1
