"""benchmarks/bench_mw_pairs.py: a small run writes the fields the docs are rendered from, and the MW page's table
is the rendering of the committed JSON (generated, not typed)."""

from __future__ import annotations

import json

from helpers.scripts import load_script

from tests.doc_blocks import REPO


def _module():
    return load_script("benchmarks/bench_mw_pairs.py")


def test_a_small_run_times_mw_cross_entropy_and_the_pairwise_stage(tmp_path):
    bench = _module()
    out = tmp_path / "run.json"
    argv = ["--batches", "8", "96", "--hard", "0", "1", "--pairwise-max", "8", "--repeats", "1", "--out", str(out)]
    assert bench.main([*argv, "--range-batch", "0", "--real-docs", "0"]) == 0
    result = json.loads(out.read_text())
    rows = {(r["batch"], r["hard_negatives"]): r for r in result["rows"]}
    assert set(rows) == {(8, 0), (96, 0), (8, 1), (96, 1)}
    assert rows[96, 1]["scores"] == 96 * 192
    assert rows[8, 0]["mw_stage"] == "pairwise" and rows[96, 1]["mw_stage"] == "grid"
    assert "pairwise_cpu_s" in rows[8, 0] and "pairwise_cpu_s" not in rows[96, 0]  # beyond --pairwise-max
    for r in rows.values():
        assert r["ce_cpu_s"] > 0 and r["grid_cpu_s"] > 0
        assert r["mw_cpu_s"] == r[f"{r['mw_stage']}_cpu_s"]  # the default's time is the stage it takes
        assert abs(r["mw_over_ce"] - r["mw_cpu_s"] / r["ce_cpu_s"]) < 1e-12
    assert result["threads"] == 1 and result["goals"] == {}  # the goals need B = 1,024 and 4,096
    assert result["ranges"] == [] and "load average" in result["load_before"]
    for r in rows.values():
        assert r["mw_median_cpu_s"] >= r["mw_cpu_s"]


def test_the_score_range_rows_time_each_range_against_cosine(tmp_path, monkeypatch):
    """Cosine at τ = 1e-4 and 1e-6, qnorm with logspace(-2, 2) and with a real model's norms (here a stand-in list,
    the real ones need the model wheel), dot: each timed beside cosine at τ = 0.01 on the same batch, with the
    layout its plan takes; the docs section renders them."""
    bench = _module()
    monkeypatch.setattr(bench, "real_norms", lambda count: [0.5 + i / count for i in range(count)])
    out = tmp_path / "run.json"
    argv = ["--batches", "8", "--hard", "0", "--pairwise-max", "8", "--repeats", "3", "--out", str(out)]
    assert bench.main([*argv, "--range-batch", "48", "--real-docs", "64"]) == 0
    result = json.loads(out.read_text())
    ranges = {(r["case"], r["hard_negatives"]): r for r in result["ranges"]}
    assert {case for case, _ in ranges} == {name for name, *_ in bench.RANGES}
    assert {hard for _, hard in ranges} == {0, 1}
    assert ranges["cosine", 0]["over_cosine"] == 1.0
    assert ranges["cosine τ = 1e-6", 0]["range_over_tau"] > 1e4 and ranges["cosine τ = 1e-6", 0]["layout"] == "pages"
    for r in ranges.values():
        assert r["mw_median_cpu_s"] >= r["mw_cpu_s"] > 0
    text = bench.table(result)
    assert "| 48 | 1 | dot, norms logspace(-2, 2) | 0.01 |" in text and "goal ≤ 3" in text


def test_quick_measures_the_same_at_smaller_sizes():
    bench = _module()
    args = bench.parse_args(["--quick"])
    assert max(args.batches) == 1024 and args.range_batch == 1024 and args.real_docs > 0


def test_the_mw_page_shows_the_committed_measurement():
    bench = _module()
    result = json.loads((REPO / "docs" / "results" / "bench_mw_pairs.json").read_text())
    page = (REPO / "docs" / "mw_loss.md").read_text()
    section = page.split(bench.START, 1)[1].split(bench.END, 1)[0]
    assert section.strip() == bench.table(result).strip()
    assert {4096, 1024} <= {r["batch"] for r in result["rows"]}
    assert (REPO / "docs" / "figures" / "mw_pairs.png").is_file()
    assert "figures/mw_pairs.png" in page
