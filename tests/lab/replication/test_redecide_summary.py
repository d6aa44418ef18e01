"""``replicate --redecide`` of a summary never rewrites it without its evidence: with its ``.items.json.gz`` beside
it, the per-item values are put back and every interval recomputed; without, it is refused in one line, or judged
again from its stored comparisons into ``--results`` (another file), never in place."""

from __future__ import annotations

import json

from test_claim_rules import dim_seeds
from test_items import _record

from st_magnitude.cli import main
from st_magnitude.lab.replication.items import items_path, write_items
from st_magnitude.lab.replication.runner import summary


def _summary(tmp_path, with_items: bool):
    record = _record("003", dim_seeds(lambda d: 5.3), fit_bootstrap=0)
    path = tmp_path / "results" / "003-cpu.json"
    path.parent.mkdir()
    path.write_text(json.dumps(summary(record)), encoding="utf-8")
    if with_items:
        write_items(record, path)
    return path, record


def test_a_summary_without_its_per_item_values_is_not_rewritten_in_place(tmp_path, capsys):
    path, _ = _summary(tmp_path, with_items=False)
    before = path.read_bytes()
    code = main(["replicate", "--redecide", str(path)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert str(path) in err and "per-item values" in err and "003-cpu.items.json.gz" in err, err
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["003-cpu.json"]


def test_a_summary_without_its_per_item_values_is_judged_again_into_another_folder(tmp_path, capsys):
    path, record = _summary(tmp_path, with_items=False)
    before = path.read_bytes()
    assert main(["replicate", "--redecide", str(path), "--results", str(tmp_path / "again")]) == 0, capsys.readouterr()
    assert path.read_bytes() == before
    again = json.loads((tmp_path / "again" / "003-cpu.json").read_text())
    assert "judged_from" in again["decision"] and again["verdict"] == record["decision"]["verdict"]


def test_a_summary_with_its_per_item_values_is_recomputed_from_them(tmp_path, capsys):
    path, record = _summary(tmp_path, with_items=True)
    items_before = items_path(path).read_bytes()
    assert main(["replicate", "--redecide", str(path)]) == 0, capsys.readouterr()
    after = json.loads(path.read_text())
    assert "judged_from" not in after["decision"] and after["redecided_utc"]  # decided from the values, not judged
    assert after["verdict"] == record["decision"]["verdict"]
    assert after["seeds"] == summary(record)["seeds"] and "per_query" not in path.read_text()  # still a summary
    assert items_path(path).read_bytes() == items_before  # still a summary beside the same values


def test_a_summary_with_another_runs_values_is_refused(tmp_path, capsys):
    path, _ = _summary(tmp_path, with_items=True)
    other = json.loads(path.read_text())
    other["seeds"] = other["seeds"][:2]
    path.write_text(json.dumps(other), encoding="utf-8")
    before = path.read_bytes()
    code = main(["replicate", "--redecide", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and "003-cpu.items.json.gz" in err and "seeds" in err and err.count("\n") == 1, err
    assert path.read_bytes() == before
