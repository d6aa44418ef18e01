"""benchmarks/bench_mw_trainer.py: its smallest run writes a row per loss pair with min, median and ratios, and its
arguments refuse what would make the numbers meaningless (so the script cannot rot between real measurements)."""

from __future__ import annotations

import json

import pytest
from helpers.scripts import load_script


def _module():
    return load_script("benchmarks/bench_mw_trainer.py")


def test_the_smallest_run_times_mw_and_mnrl_through_the_trainer(tmp_path):
    bench = _module()
    out = tmp_path / "run.json"
    argv = ["--quick", "--model", "tiny", "--dataset", "synthetic", "--batches", "4", "--cached-batch", "6"]
    assert bench.main([*argv, "--mini-batch-size", "4", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["repeats"] == 3 and result["threads"] == 1 and "load_average_before" in result
    rows = {(r["ours"], r["theirs"]): r for r in result["rows"]}
    assert set(rows) == {("MWLoss", "MNRL"), ("CachedMWLoss", "CachedMNRL")}
    assert rows["CachedMWLoss", "CachedMNRL"]["batch"] == 6
    for r in rows.values():
        for side in ("ours", "theirs"):
            cpu = r[f"{side}_cpu_s"]
            assert len(cpu["all"]) == 3 and 0 < cpu["min"] <= cpu["median"]
        assert r["ratio_cpu_median"] == pytest.approx(r["ours_cpu_s"]["median"] / r["theirs_cpu_s"]["median"])


@pytest.mark.parametrize("bad", [["--repeats", "2"], ["--mini-batch-size", "0"], ["--batches", "0"]])
def test_arguments_that_would_make_the_numbers_meaningless_are_refused(bad):
    with pytest.raises(SystemExit):
        _module().parse_args(bad)


def test_quick_mode_measures_the_same_rows_at_a_smaller_size():
    args = _module().parse_args(["--quick"])
    assert (args.batches, args.cached_batch, args.mini_batch_size) == ([16, 32], 64, 16)
    args = _module().parse_args([])
    assert (args.batches, args.cached_batch, args.mini_batch_size) == ([64, 256], 1024, 64)


def test_the_mw_page_shows_the_committed_measurement():
    from tests.doc_blocks import REPO

    bench = _module()
    result = json.loads((REPO / "docs" / "results" / "bench_mw_trainer.json").read_text())
    page = (REPO / "docs" / "mw_loss.md").read_text()
    section = page.split(bench.START, 1)[1].split(bench.END, 1)[0]
    assert section.strip() == bench.table(result).strip()
    assert len(result["rows"]) == 3 and result["repeats"] >= 3
