"""Where ``st-magnitude replicate`` writes, what it records about the run's cost, and the page's forest plot — on a
stub claim (no training): tracked summaries only with ``--results``, never a result with more seeds replaced without
``--force``, measured CPU-seconds / wall time / load average in every result."""

from __future__ import annotations

import json
import resource
from pathlib import Path

import numpy as np
import pytest

from st_magnitude.evaluation import stats, verdicts
from st_magnitude.lab.replication import runner
from st_magnitude.lab.replication.claim import Claim
from st_magnitude.lab.replication.forest import judged_comparisons


def _run_seed(ctx):
    rng = np.random.default_rng(ctx.seed)
    burn = sum(i * i for i in range(200_000))  # some CPU time to measure
    base = rng.uniform(0, 1, 30)
    return {"per_item": {"a": (base + 0.2).tolist(), "b": (base + rng.normal(0, 0.05, 30)).tolist()}, "burn": burn}


def _decide(seeds, settings):
    c = stats.compare_arms([s["per_item"]["a"] for s in seeds], [s["per_item"]["b"] for s in seeds], metric="m")
    v = verdicts.verdict(c, expect="greater", threshold=0.05)
    return {**verdicts.combine_verdicts([v]), "ours": c.describe()}


STUB = Claim(
    id="001",
    paper="001",
    title="stub",
    statement="a − b > 0.05",
    paper_number="—",
    verdict_rule="a − b > 0.05",
    profiles={"cpu": {"steps": 1}, "gpu": {"steps": 1}},
    differences={"cpu": [], "gpu": []},
    run_seed=_run_seed,
    decide=_decide,
)


@pytest.fixture
def stub(monkeypatch, tmp_path):
    monkeypatch.setattr(runner, "get_claim", lambda claim_id: STUB)
    monkeypatch.chdir(tmp_path)
    return dict(data=str(tmp_path), device="cpu", out=tmp_path / "out", command="st-magnitude replicate 001 (test)")


def test_a_run_records_measured_cost_and_writes_no_summary_unless_asked(stub, tmp_path):
    before = resource.getrusage(resource.RUSAGE_SELF)
    rec = runner.run_claim("001", seeds=2, **stub)
    spent = resource.getrusage(resource.RUSAGE_SELF)
    r = rec["resources"]
    assert 0 < r["cpu_seconds"] <= (spent.ru_utime + spent.ru_stime) - (before.ru_utime + before.ru_stime) + 0.05
    assert r["cpu_seconds"] == pytest.approx(r["cpu_seconds_process"] + r["cpu_seconds_children"], abs=0.02)
    assert r["wall_seconds"] > 0 and len(r["load_average_start"]) == len(r["load_average_end"]) == 3
    assert all(s["resources"]["cpu_seconds"] > 0 for s in rec["seeds"])
    assert "budget" not in rec  # estimates are not recorded
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.json"))
    assert written == [Path(rec["full_result"]).relative_to(tmp_path).as_posix()]  # only the full JSON, in --output
    assert json.loads(Path(rec["full_result"]).read_text())["resources"]["cpu_seconds"] == r["cpu_seconds"]


def test_a_summary_with_more_seeds_is_not_replaced_without_force(stub, tmp_path):
    results = tmp_path / "results"
    runner.run_claim("001", seeds=3, results=results, **stub)
    assert len(json.loads((results / "001-cpu.json").read_text())["seeds"]) == 3
    with pytest.raises(ValueError, match=r"finished 3-seed result.*1 seed.*--force"):
        runner.run_claim("001", seeds=1, results=results, **stub)
    assert len(json.loads((results / "001-cpu.json").read_text())["seeds"]) == 3  # refused before running
    runner.run_claim("001", seeds=1, results=results, force=True, **stub)
    assert len(json.loads((results / "001-cpu.json").read_text())["seeds"]) == 1


def test_replacing_a_result_made_under_other_settings_is_named(stub, tmp_path, caplog):
    results = tmp_path / "results"
    runner.run_claim("001", seeds=1, results=results, **stub)
    caplog.set_level("WARNING", logger="st_magnitude")
    runner.run_claim("001", seeds=1, results=results, **stub)  # a re-run: nothing to say
    assert not [r for r in caplog.records if "replacing" in r.getMessage()]
    runner.run_claim("001", seeds=1, results=results, overrides={"steps": 2}, **stub)
    (warned,) = [r.getMessage() for r in caplog.records if "replacing" in r.getMessage()]
    assert "replacing a finished 1-seed result" in warned and "differs in settings" in warned
    assert json.loads((results / "001-cpu.json").read_text())["settings"]["steps"] == 2


def test_cli_prints_where_it_writes_and_list_shows_recorded_cost(stub, tmp_path, capsys, monkeypatch):
    from st_magnitude.cli import main

    monkeypatch.setattr("st_magnitude.lab.replication.claims.get_claim", lambda claim_id: STUB)
    (tmp_path / "mkdocs.yml").write_text("site_name: x\n")  # a repository root: still no summary unless asked
    assert (
        main(["replicate", "001", "--seeds", "1", "--data-root", str(tmp_path), "--output", "o", "--device", "cpu"])
        == 0
    )
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("replicate 001 (cpu, 1 seed): writing the full result to ")
    assert "no summary" in out
    assert "wrote " in out and not (tmp_path / "docs").exists()
    argv = ["replicate", "001", "--seeds", "2", "--data-root", str(tmp_path), "--output", "o", "--device", "cpu"]
    assert main([*argv, "--results", "res"]) == 0
    out = capsys.readouterr().out
    assert f"summary to {(tmp_path / 'res').resolve()}" in out and f"wrote {Path('res') / '001-cpu.json'}" in out
    assert main(["replicate", "--list", "--results", "res"]) == 0
    listing = capsys.readouterr().out
    assert "cpu: 2 seeds, " in listing and " CPU-s, " in listing and "load (1-min) " in listing
    assert "gpu: not yet recorded" in listing and "≈" not in listing


def test_forest_rows_carry_the_rule_and_the_report_writes_the_plot(stub, tmp_path):
    from st_magnitude.lab.replication.report import FOREST_PATH, write_report

    rec = runner.run_claim("001", seeds=2, results=tmp_path / "results", **stub)
    (row,) = judged_comparisons("001 cpu", rec)
    c = rec["decision"]["parts"][0]["comparison"]
    assert (row["estimate"], row["low"], row["high"]) == (c["diff"], c["ci"]["low"], c["ci"]["high"])
    assert (row["expect"], row["threshold"], row["verdict"]) == ("greater", 0.05, rec["verdict"])
    old = {"decision": {"parts": [{**rec["decision"]["parts"][0], "claim": "m: a − b < -0.1"}]}}
    for key in ("expect", "threshold"):
        old["decision"]["parts"][0].pop(key)
    assert judged_comparisons("x", old)[0]["threshold"] == -0.1  # parsed from an older result's rule text
    page = write_report(tmp_path / "results", tmp_path / "site" / "replication.md")
    png = page.parent / FOREST_PATH
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"]({FOREST_PATH})" in page.read_text()
    vc = c["components"]
    var = [vc["seed"] / 2, vc["item"] / 30, vc["residual"] / 60]  # 2 seeds × 30 items
    shares = " / ".join(f"{100 * v / sum(var):.0f}%" for v in var)
    assert f"| {shares} |" in page.read_text()  # the details table shows where the interval's variance comes from


def test_a_failed_gate_shows_on_the_page_and_in_the_forest(stub, tmp_path):
    from st_magnitude.lab.replication.report import forest_rows, render_report

    results = tmp_path / "results"
    runner.run_claim("001", seeds=2, results=results, **stub)
    path = results / "001-cpu.json"
    rec = json.loads(path.read_text())
    gate = {"gate": "infonce beats the untrained base", "passed": False, "reason": "m: within noise"}
    rec["decision"].update(gates=[gate], ungated_verdict=rec["verdict"], gate_note="gate failed, nothing judged")
    rec["verdict"] = rec["decision"]["verdict"] = "not reached at this budget"
    path.write_text(json.dumps(rec))
    text = render_report(results)
    assert "- gate FAILED: infonce beats the untrained base (m: within noise)" in text
    assert "| 001 | cpu | **not reached at this budget** |" in text
    assert [r["verdict"] for r in forest_rows(results)] == ["not reached at this budget"]


COMMITTED = Path(__file__).resolve().parents[3] / "docs" / "replication" / "results"


@pytest.mark.parametrize(
    "path", sorted(p for p in COMMITTED.glob("*.json") if p.name != "not_run.json"), ids=lambda p: p.name
)
def test_a_committed_cost_counts_every_seed(path):
    """The recorded CPU-seconds of a committed result cover all its seeds, also when the run was resumed after a
    kill or merged from parts (a resumed run once reported only the process that finished it)."""
    rec = json.loads(path.read_text())
    per_seed = sum(s["resources"]["cpu_seconds"] for s in rec["seeds"])
    assert rec["resources"]["cpu_seconds"] >= 0.999 * per_seed, (rec["resources"], per_seed)


COVERAGE = Path(__file__).resolve().parents[3] / "docs" / "replication" / "interval_coverage.json"


def test_the_coverage_file_the_page_prints_is_checked_at_the_boundary(tmp_path):
    """Every value the page's coverage table prints comes through one reader: a hostile file gets one line naming
    the key, never a traceback or a table with a coverage above 1."""
    from st_magnitude._trust import InputFileError
    from st_magnitude.lab.replication.report import read_coverage

    good = json.loads(COVERAGE.read_text(encoding="utf-8"))
    assert len(read_coverage(COVERAGE)["rows"]) == len(good["rows"])

    def broken(change) -> dict:
        doc = json.loads(json.dumps(good))
        change(doc)
        return doc

    cases = [
        (lambda d: d["rows"][0]["cells"]["5"].update(after=1.2), "rows[0].cells.5.after': must be ≤ 1"),
        (lambda d: d["rows"][1]["cells"].pop("5"), "rows[1].cells': must hold the seed counts of the first row"),
        (lambda d: d["rows"][0].update(kind="lognormal"), "rows[0].kind': must be one of"),
        (lambda d: d["rows"][0].update(shares=[0.5, "x", 0.5]), "must be three shares in [0, 1]"),
        (lambda d: d["rows"][0]["cells"]["3"].update(width_before=0), "width_before': must be > 0"),
        (lambda d: d.update(rows=[]), "'rows': must hold at least one row"),
        (lambda d: d.pop("n_boot"), "'n_boot': is missing"),
        (lambda d: d.update(rows=[7]), "rows[0] must hold a JSON object"),
    ]
    path = tmp_path / "interval_coverage.json"
    for change, expected in cases:
        path.write_text(json.dumps(broken(change)), encoding="utf-8")
        with pytest.raises(InputFileError) as info:
            read_coverage(path)
        assert str(info.value).startswith(str(path)) and expected in str(info.value), str(info.value)
