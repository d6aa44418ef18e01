"""The GPU benchmark's dry run: the same code path as on the GPU (every section), on the CPU with tiny models and a
toy BEIR folder, and its docs section rendered from the JSON it writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers.scripts import load_script
from helpers.toy_beir import write_toy_beir

REPO = Path(__file__).resolve().parents[1]


def _module(name: str):
    return load_script(f"benchmarks/gpu/{name}.py")


@pytest.fixture(scope="module")
def dry_result(tmp_path_factory) -> tuple[dict, Path]:
    root = tmp_path_factory.mktemp("gpu_bench")
    data = root / "data"
    nf = write_toy_beir(data / "nfcorpus", n_docs=40, n_queries=16)
    write_toy_beir(nf, n_docs=40, n_queries=16, split="train", seed=1)
    write_toy_beir(data / "scifact", n_docs=40, n_queries=8)
    out = root / "gpu.json"
    threads = torch.get_num_threads()
    try:
        rc = _module("bench").main(["--dry-run", "--data", str(data), "--out", str(out)])
    finally:
        torch.set_num_threads(threads)
    assert rc == 0, json.loads(out.read_text())["errors"]
    return json.loads(out.read_text()), out


def test_every_section_runs_and_compares_against_its_baseline(dry_result):
    result, _ = dry_result
    assert result["dry_run"] is True and result["errors"] == {}
    res = result["results"]
    assert set(res) == {"step", "syncs", "mw_pairs", "trainer", "encode", "search"}
    steps = res["step"]
    # every loss at every model × dtype, each of ours with a ratio to its ST baseline of the same setting
    assert {(r["model"], r["dtype"]) for r in steps} == {(m, d) for m in ("minilm", "mpnet") for d in ("fp32", "bf16")}
    ours = [r for r in steps if r["loss"] not in ("MNRL", "CMNRL")]
    big = [r for r in steps if r["batch"] not in (8, 4)]  # CachedMW against CMNRL at the large batches
    assert {(r["loss"], r["batch"], r["dtype"]) for r in big} == {("CachedMW", 16, "bf16"), ("CMNRL", 16, "bf16")}
    assert len(ours) == 6 * 4 + 1 and all("error" not in r and r["time_ratio"] > 0 for r in ours)
    assert {r["baseline"] for r in ours if r["loss"].startswith("Cached")} == {"CMNRL"}
    # no CUDA: the sync counts are recorded as not measured, never as a measured zero
    assert all(r["measured"] is False for r in res["syncs"])
    assert all("error" not in r for r in res["syncs"])
    # counted in a steady-state step, beside what each of our losses declares
    assert all(r["counted_call"] > 1 for r in res["syncs"])
    declared = {r["loss"]: r["declared_host_reads"] for r in res["syncs"] if "declared_host_reads" in r}
    assert declared["L2Dir"] == 0 and declared["MW"] == 1  # MW's grid reads the score range once a step
    # MW's pair stages side by side at every size, the pairwise one while its pairs fit the bound
    mw = {(r["batch"], r["hard_negatives"]): r for r in res["mw_pairs"]}
    assert set(mw) == {(8, 0), (16, 0), (8, 1), (16, 1)}
    assert all(r["grid_s"] > 0 and r["auto_stage"] in ("grid", "pairwise") for r in mw.values())
    assert "pairwise_s" in mw[8, 0] and "pairwise_s" not in mw[16, 1]  # 16·32·16 pairs exceed the dry bound
    tr = res["trainer"]
    assert tr["steps"] == 2 and tr["compare_steps_per_s"] > 0 and tr["plain_steps_per_s"] > 0
    assert "--full" in tr["command"] and "/tmp" not in tr["command"]
    # the qnorm model's documents point where the plain model's do (qnorm leaves documents raw)
    assert res["encode"]["max_direction_diff"] < 1e-4
    assert set(res["encode"]["tokenizers"]) == {"serial", "parallel"}
    assert res["search"]["same_top_k_up_to_ties"] is True and "same {qid" in res["search"]["baseline"]


def test_the_docs_section_is_generated_and_replaced_in_place(dry_result, tmp_path):
    _, path = dry_result
    render = _module("render")
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\nhand-written text\n")
    assert render.main([str(path), "--doc", str(doc)]) == 0
    once = doc.read_text()
    assert once.startswith("# Benchmarks\n\nhand-written text\n")
    assert render.START in once and render.END in once and "**Dry run**" in once
    assert "| minilm | 8 | bf16 | CachedMW |" in once
    assert "### MW: grid vs every pair" in once and "| 16 | 1 | 8,192 |" in once
    doc.write_text(once + "\nlater text\n")
    assert render.main([str(path), "--doc", str(doc)]) == 0
    twice = doc.read_text()
    assert twice == once + "\nlater text\n"  # rendered again: the section is replaced, not appended


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown where there is no GPU")
def test_without_cuda_it_says_so_instead_of_measuring_the_cpu(tmp_path, capsys):
    assert _module("bench").main(["--out", str(tmp_path / "x.json"), "--data", str(tmp_path)]) == 2
    assert "no CUDA device" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()
