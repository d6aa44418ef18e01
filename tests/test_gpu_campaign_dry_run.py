"""The replication campaign's dry run: seeds accumulate across runs (the state is the committed part files), each run
takes the next missing seed of the claim first in line and merges it with the committed ones."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import build_tiny_bert_dir, build_tiny_st
from helpers.scripts import load_script
from helpers.toy_beir import write_toy_beir

REPO = Path(__file__).resolve().parents[1]


def _campaign():
    return load_script("benchmarks/gpu/campaign.py", register=True)  # its dataclass looks its module up there


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("campaign")
    for name in ("nfcorpus", "scifact"):
        for split in ("train", "dev", "test"):
            write_toy_beir(root / "data" / "beir" / name, n_docs=24, n_queries=8, split=split)
    st_dir = root / "st_normalize"
    build_tiny_st(build_tiny_bert_dir(root / "bert"), normalize=True).save(str(st_dir))
    return {"root": root, "data": root / "data", "model": st_dir}


def test_the_committed_parts_are_the_state_and_the_plan_follows_the_priority(tmp_path):
    campaign = _campaign()
    parts = tmp_path / "parts"
    first = campaign.CAMPAIGN[0]
    assert [(e.name, k) for e, k in campaign.plan(3, parts)] == [(first.name, 0), (first.name, 1), (first.name, 2)]
    for k in range(campaign.TARGET):  # the first claim done: the next one in line gets the seeds
        path = parts / first.name / f"seed-{k}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"status": "finished", "seeds": [{"seed": k}]}))
    (parts / first.name / "stopped.json").write_text(json.dumps({"status": "running", "seeds": [{"seed": 9}]}))
    second = campaign.CAMPAIGN[1]
    assert sorted(campaign.done_seeds(first, parts)) == list(range(campaign.TARGET))  # unfinished part not counted
    assert [(e.name, k) for e, k in campaign.plan(2, parts)] == [(second.name, 0), (second.name, 1)]


@pytest.mark.heavy  # two replicate dry runs and a merge in subprocesses: about 100 CPU-s
def test_two_runs_accumulate_seeds_and_merge_them(setup, tmp_path):
    campaign = _campaign()
    parts = tmp_path / "parts"
    common = [
        "--only",
        "000-appf",
        "--dry-run",
        "--data-root",
        str(setup["data"]),
        "--model",
        f"000-appf={setup['model']}",
    ]
    out1 = tmp_path / "run1"
    assert campaign.main(["--parts", str(parts), "--parallel", "1", "run", "--out", str(out1), *common]) == 0
    rec1 = json.loads((out1 / "campaign.json").read_text())
    assert [(s["run"], s["seed"]) for s in rec1["seeds"]] == [("000-appf-gpu", 0)]
    assert rec1["merged"]["000-appf-gpu"]["exit"] == 0 and rec1["merged"]["000-appf-gpu"]["parts"] == 1
    assert rec1["done_after"]["000-appf-gpu"] == [0]
    # commit the returned part (collect refuses a dry run's parts: they are not evidence)
    with pytest.raises(SystemExit, match="dry run"):
        campaign.main(["--parts", str(parts), "collect", str(out1), "--results", str(tmp_path / "results")])
    (parts / "000-appf-gpu").mkdir(parents=True)
    shutil.copyfile(out1 / "000-appf-gpu--seed-0.json", parts / "000-appf-gpu" / "seed-0.json")

    out2 = tmp_path / "run2"
    assert campaign.main(["--parts", str(parts), "--parallel", "1", "run", "--out", str(out2), *common]) == 0
    rec2 = json.loads((out2 / "campaign.json").read_text())
    assert [(s["run"], s["seed"]) for s in rec2["seeds"]] == [("000-appf-gpu", 1)]  # the next seed, not seed 0 again
    merged = rec2["merged"]["000-appf-gpu"]
    assert merged["exit"] == 0 and merged["parts"] == 2 and "merged 2 parts" in merged["output"]
    assert rec2["done_after"]["000-appf-gpu"] == [0, 1]
    part = json.loads((out2 / "000-appf-gpu--seed-1.json").read_text())
    assert [s["seed"] for s in part["seeds"]] == [1] and part["dry_run"]
