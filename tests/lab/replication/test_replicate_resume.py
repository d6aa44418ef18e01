"""A run in parts: `replicate` killed with SIGKILL mid-run resumes; per-seed runs merge into the run one process
makes; a refused run leaves no folder behind.

The kill is real: a child process runs the claim and sends itself SIGKILL right after the first seed's partial
result was written (the moment a kill loses the most work). The next run of the same configuration continues that
file and finishes with the seeds an uninterrupted run produces; a run with other settings starts clean in a new
file and leaves the partial one and the committed summary as they were. Before, every run started over in a new
file, and a run refused for its ``--model`` left an empty ``--output`` folder.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import WORDS, build_tiny_bert_dir
from helpers.toy_beir import write_toy_beir

from st_magnitude.cli import main
from st_magnitude.lab.replication.merge import merge_runs
from st_magnitude.lab.replication.runner import run_claim

REPO = Path(__file__).resolve().parents[3]
CLAIM = "000-table5"
TINY = {"train_pairs": 16, "batch_size": 4, "max_seq_length": 16, "n_boot": 20}

_KILLED_CHILD = r"""
import json, os, signal, sys
import st_magnitude.lab.replication.runner as runner
real = runner.write_json_atomic
def write_then_die(path, obj, *args, **kwargs):
    real(path, obj, *args, **kwargs)
    if obj.get("status") == "running" and len(obj["seeds"]) == 1:
        os.kill(os.getpid(), signal.SIGKILL)  # right after the first seed was recorded
runner.write_json_atomic = write_then_die
kw = json.loads(sys.argv[1])
runner.run_claim(kw.pop("claim"), **kw)
"""


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("replicate_resume")
    data = root / "data"
    for name in ("nfcorpus", "scifact"):
        for split in ("train", "test"):
            write_toy_beir(data / "beir" / name, n_docs=24, n_queries=8, split=split)
    sts = data / "sts" / "stsbenchmark"
    sts.mkdir(parents=True)
    rng = random.Random(0)
    for split, n in (("train", 24), ("test", 30)):
        with open(sts / f"sts-{split}.csv", "w", encoding="utf-8") as f:
            for i in range(n):
                s1, s2 = (" ".join(rng.choice(WORDS) for _ in range(6)) for _ in range(2))
                f.write(f"main-captions\tMSRvid\t2012test\t{i:04d}\t{rng.uniform(0, 5):.3f}\t{s1}\t{s2}\n")
    return build_tiny_bert_dir(root / "bert"), data


def _kwargs(setup, out: Path, results: Path, **overrides) -> dict:
    model, data = setup
    return dict(
        profile="cpu", seeds=2, data=str(data), out=str(out), results=str(results), device="cpu",
        model=str(model), overrides={**TINY, **overrides}, command="st-magnitude replicate 000-table5 (test)",
    )  # fmt: skip


def _no_time(obj):
    """``obj`` without its timings and recorded costs (``wall_seconds``, ``train_seconds``, ``resources`` with its
    load averages): the only fields a re-run changes."""
    if isinstance(obj, dict):
        return {k: _no_time(v) for k, v in obj.items() if not (k.endswith("seconds") or k == "resources")}
    return [_no_time(v) for v in obj] if isinstance(obj, list) else obj


def _seeds(record: dict) -> list[dict]:
    return _no_time(record["seeds"])


@pytest.mark.slow  # three tiny claim runs and one child process: ~40 s on the shared 2-core machine
def test_kill_9_after_a_seed_then_the_same_command_resumes_it(setup, tmp_path, caplog):
    results = tmp_path / "results"
    reference = run_claim(CLAIM, **_kwargs(setup, tmp_path / "ref", tmp_path / "ref-results"))

    out = tmp_path / "out"
    # the child computes seed 0 with the parent's thread count: float sums differ across thread counts
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": str(torch.get_num_threads())}
    child = subprocess.run(
        [sys.executable, "-c", _KILLED_CHILD, json.dumps({"claim": CLAIM, **_kwargs(setup, out, results)})],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    (partial,) = [p for p in out.iterdir() if not p.name.startswith(".")]
    saved = json.loads(partial.read_text())
    assert saved["status"] == "running" and [s["seed"] for s in saved["seeds"]] == [0]
    assert not results.exists()  # nothing committed by a killed run

    other = run_claim(CLAIM, **_kwargs(setup, out, results, n_boot=21))  # other settings: cannot resume
    assert "cannot resume" in caplog.text and "different settings" in caplog.text
    assert other["full_result"] != str(partial) and json.loads(partial.read_text()) == saved
    committed = (results / f"{CLAIM}-cpu.json").read_text()

    caplog.clear()
    resumed = run_claim(CLAIM, **_kwargs(setup, out, results))
    assert "resuming" in caplog.text and resumed["full_result"] == str(partial)
    assert _seeds(resumed) == _seeds(reference)  # seed 0 from before the kill, seed 1 run now: as uninterrupted
    assert resumed["verdict"] == reference["verdict"] and _no_time(resumed["decision"]) == _no_time(
        reference["decision"]
    )
    assert json.loads(partial.read_text())["status"] == "finished" and len(resumed["resumed_utc"]) == 1
    # the cost counts the killed process's seed too, not only the process that finished the run
    killed_cpu = saved["resources"]["cpu_seconds"]
    assert resumed["resources_before_resume"] == [saved["resources_process"]]
    assert resumed["resources"]["cpu_seconds"] == pytest.approx(
        killed_cpu + resumed["resources_process"]["cpu_seconds"], abs=0.02
    )
    assert resumed["resources"]["processes"] == 2
    assert (results / f"{CLAIM}-cpu.json").read_text() != committed  # replaced whole, by the finished run


def test_a_refused_model_leaves_no_out_folder(setup, tmp_path, capsys):
    model, data = setup
    hostile = tmp_path / "hostile"
    hostile.mkdir()
    (hostile / "config.json").write_text(json.dumps({"auto_map": {"AutoModel": "evil.Model"}, "model_type": "bert"}))
    for name, where in (("missing", str(tmp_path / "no-such-model")), ("hostile", str(hostile))):
        out = tmp_path / f"out-{name}"
        argv = ["replicate", CLAIM, "--model", where, "--data-root", str(data), "--output", str(out), "--seeds", "1"]
        assert main([*argv, "--results", str(tmp_path / "results"), "--device", "cpu"]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and err.count("error:") == 1, err
        assert not out.exists(), f"{name}: {list(out.iterdir())}"
    assert not (tmp_path / "results").exists()


def _part(setup, out: Path, seed: int) -> dict:
    kw = _kwargs(setup, out, out)
    kw.update(
        results=None,  # a part writes no summary: the merge does
        seeds=1,
        first_seed=seed,
        command=f"st-magnitude replicate {CLAIM} --seeds 1 --first-seed {seed} --device cpu",
    )
    return run_claim(CLAIM, **kw)


@pytest.mark.slow  # four tiny seed runs: ~40 s on the shared 2-core machine
def test_per_seed_parts_merge_into_the_run_one_process_makes(setup, tmp_path):
    """Seeds run in separate processes (``--first-seed K --seeds 1``, e.g. at once on one GPU) and merged give the
    seeds and the decision of one uninterrupted 2-seed run."""
    reference = run_claim(CLAIM, **_kwargs(setup, tmp_path / "ref", tmp_path / "ref-results"))
    parts = [_part(setup, tmp_path / f"part{k}", k)["full_result"] for k in (1, 0)]
    merged = merge_runs(parts, tmp_path / "merged")
    assert _seeds(merged) == _seeds(reference)
    assert _no_time(merged["decision"]) == _no_time(reference["decision"])


def test_merge_sums_the_parts_costs_and_refuses_parts_of_other_runs(setup, tmp_path, capsys):
    """``--merge``: seeds in order, the parts' CPU-seconds summed, a command that reproduces the merged seeds, every
    part listed; parts that are not one run (other settings, a seed twice, one part) are refused by name."""
    part0 = _part(setup, tmp_path / "part0", 0)
    rec = json.loads(Path(part0["full_result"]).read_text())
    rec["seeds"][0]["seed"], rec["command"] = 1, rec["command"].replace("--first-seed 0", "--first-seed 1")
    rec["resources"]["cpu_seconds"] = 7.5
    part1 = tmp_path / "part1.json"
    part1.write_text(json.dumps(rec))  # seed 0's record standing in for seed 1: the merge reads, it does not train
    files = [str(part1), part0["full_result"]]
    results, out = tmp_path / "results", tmp_path / "merged"
    assert main(["replicate", "--merge", *files, "--output", str(out), "--results", str(results)]) == 0
    assert "merged 2 parts, 2 seeds [0, 1]" in capsys.readouterr().out
    (full_file,) = out.iterdir()
    merged = json.loads(full_file.read_text())
    assert [s["seed"] for s in merged["seeds"]] == [0, 1] and merged["status"] == "finished"
    assert merged["resources"]["cpu_seconds"] == pytest.approx(part0["resources"]["cpu_seconds"] + 7.5)
    assert merged["command"] == f"st-magnitude replicate {CLAIM} --device cpu --seeds 2"
    assert [m["seeds"] for m in merged["merged_from"]] == [[0], [1]]
    summary = json.loads((results / f"{CLAIM}-cpu.json").read_text())
    assert summary["verdict"] == merged["verdict"] and len(summary["seeds"]) == 2

    rec["settings"]["n_boot"] += 1
    (tmp_path / "other.json").write_text(json.dumps(rec))
    for argv, why in (
        ([files[1], str(tmp_path / "other.json")], "differ in settings"),
        ([files[1], files[1]], "seed(s) [0] appear in more than one part"),
        ([files[1]], "at least two"),
        ([CLAIM, *files], "--merge takes no claim"),
    ):
        claim, argv = (argv[:1], argv[1:]) if argv[0] == CLAIM else ([], argv)
        assert main(["replicate", *claim, "--merge", *argv, "--output", str(tmp_path / "refused")]) == 2
        err = capsys.readouterr().err
        assert why in err and "Traceback" not in err, err
    assert not (tmp_path / "refused").exists()


def test_a_merged_wall_time_counts_the_time_some_part_ran():
    """Parts at once count once; the hours between parts run in turn (another session, another day) do not."""
    from st_magnitude.lab.replication.merge import _merged_resources

    def part(start: str, end: str) -> dict:
        return {"started_utc": f"2026-01-01T{start}+00:00", "finished_utc": f"2026-01-01T{end}+00:00",
                "resources": {"cpu_seconds": 10.0, "wall_seconds": 1.0}}  # fmt: skip

    at_once = _merged_resources([part("10:00:00", "11:00:00"), part("10:30:00", "11:10:00")])
    assert at_once["wall_seconds"] == 70 * 60 and at_once["cpu_seconds"] == 20.0
    in_turn = [part("09:00:00", "10:00:00"), part("13:00:00", "14:00:00"), part("13:10:00", "13:50:00")]
    assert _merged_resources(in_turn)["wall_seconds"] == 120 * 60
    assert _merged_resources(list(reversed(in_turn)))["wall_seconds"] == 120 * 60
    stopped = dict(
        part("09:00:00", "09:00:00"), finished_utc=None, resources={"cpu_seconds": 1.0, "wall_seconds": 1800}
    )
    assert _merged_resources([stopped, *in_turn[1:]])["wall_seconds"] == 90 * 60  # a stopped run: start + its wall
    unknown = dict(stopped, started_utc=None)  # no times at all: the parts' own wall times, summed
    assert _merged_resources([unknown, in_turn[1]])["wall_seconds"] == 1800 + 1.0
