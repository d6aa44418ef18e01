"""Every committed replication verdict re-derives unchanged: ``st-magnitude replicate --redecide`` of each committed
summary (a copy without its per-item values, judged again into ``--results``), made now by the current code, gives
the verdict and the statements' verdicts the page shows.

A summary holds no per-item values, so re-deciding it judges its stored comparisons again by the claim's current rule
(:func:`st_magnitude.lab.replication.runner.judge_again`); a change to a rule, a gate or the multiplicity correction
that would flip a committed verdict fails here before the page goes stale.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from st_magnitude.cli import main

COMMITTED = Path(__file__).resolve().parents[3] / "docs" / "replication" / "results"
SUMMARIES = sorted(p for p in COMMITTED.glob("*.json") if p.name not in ("not_run.json", "interval_coverage.json"))


def _verdicts(record: dict) -> tuple[str, list[tuple[str, str]]]:
    statements = record["decision"].get("statements", [])
    return record["verdict"], [(s["name"], s["verdict"]) for s in statements]


@pytest.mark.parametrize("path", SUMMARIES, ids=lambda p: p.name)
def test_redecide_gives_the_committed_verdict(path, tmp_path, capsys):
    copy = tmp_path / path.name
    shutil.copy(path, copy)  # without its per-item values: judged again into --results, not in place
    assert main(["replicate", "--redecide", str(copy), "--results", str(tmp_path / "again")]) == 0
    before, after = json.loads(path.read_text()), json.loads((tmp_path / "again" / path.name).read_text())
    assert _verdicts(after) == _verdicts(before)
    assert after["redecided_utc"]  # it was decided again, not copied


def test_the_check_sees_a_flipped_verdict(tmp_path):
    """The comparison above can fail: a summary whose stored verdict disagrees with its comparisons is re-decided
    to what the comparisons say, not kept."""
    path = next((p for p in SUMMARIES if json.loads(p.read_text())["verdict"] == "reproduces"), None)
    if path is None:
        pytest.skip("no committed 'reproduces' verdict")
    record = json.loads(path.read_text())
    record["verdict"] = record["decision"]["verdict"] = "contradicts"
    copy = tmp_path / path.name
    copy.write_text(json.dumps(record))
    assert main(["replicate", "--redecide", str(copy), "--results", str(tmp_path / "again")]) == 0
    assert json.loads((tmp_path / "again" / path.name).read_text())["verdict"] == "reproduces"


def test_the_evidence_page_shows_the_generated_summary_table():
    """docs/evidence.md includes the replication page's generated summary table (no hand-kept copy to go stale)."""
    from st_magnitude.lab.replication.report import SUMMARY_SNIPPET, render_report

    page = render_report(COMMITTED)
    start, end = f"<!-- --8<-- [start:{SUMMARY_SNIPPET}] -->", f"<!-- --8<-- [end:{SUMMARY_SNIPPET}] -->"
    table = page.split(start, 1)[1].split(end, 1)[0]
    assert table.count("\n| ") >= 2 * len(SUMMARIES)  # a cpu and a gpu row per claim
    evidence = (COMMITTED.parents[1] / "evidence.md").read_text(encoding="utf-8")
    assert f'--8<-- "docs/replication.md:{SUMMARY_SNIPPET}"' in evidence
    assert "| claim | seeds | CPU-s |" not in evidence  # the hand-kept table is gone
