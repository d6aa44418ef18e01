"""No command writes over or inside what it reads: an output that is, or lies inside, an input of the command (the
``--data`` folder and its files, ``--norm-texts``, the CSV of ``scaling fit``, ``--train-data`` / ``--eval-data``
folders), however the path is spelled (``..``, a symlink to the folder), is refused in one line naming the input,
before any work, and the input is left as it was.

Before, an output file written over the data folder's own files (``D/corpus.jsonl``, ``D/qrels/test.tsv``, or through
a link to ``D``) overwrote the data the command had just read, exit 0. Only the model folder was protected.
"""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path

import pytest
from helpers.toy_beir import write_model_and_toy

from st_magnitude.cli import COMMANDS, build_parser, main


@pytest.fixture(scope="module")
def world(tiny_bert_dir, tmp_path_factory):
    return write_model_and_toy(tmp_path_factory.mktemp("over_inputs"), tiny_bert_dir)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b"/" for p in sorted(folder.rglob("*"))}


#: command line (M: the model, D: a copy of the toy BEIR folder, L: a symlink to D) -> (option refused, input named)
CASES = {
    "evaluate -o D": (["evaluate", "M", "--data", "D", "-o", "D"], "--output", "--data"),
    "evaluate -o D/qrels": (["evaluate", "M", "--data", "D", "-o", "D/qrels"], "--output", "--data"),
    "evaluate -o L/rows": (["evaluate", "M", "--data", "D", "-o", "L/rows"], "--output", "--data"),
    "evaluate --data L -o D/x/../rows": (
        ["evaluate", "M", "--data", "L", "-o", "D/x/../rows"], "--output", "--data",
    ),
    "calibrate -o D/qrels/..": (["calibrate", "M", "--data", "D", "-o", "D/qrels/.."], "--output", "--data"),
    "calibrate --output D": (["calibrate", "M", "--data", "D", "--output", "D"], "--output", "--data"),
    "diagnose -o D/report": (["diagnose", "M", "--data", "D", "--no-kappa", "-o", "D/report"], "--output", "--data"),
    "convert --norm-texts D/corpus.jsonl -o D/corpus.jsonl": (
        ["convert", "M", "dot", "--store", "cosine", "--norm-texts", "D/corpus.jsonl", "-o", "D/corpus.jsonl"],
        "--output",
        "--norm-texts",
    ),
    "mteb run -t D -o D/results": (["mteb", "run", "-m", "M", "-t", "D", "-o", "D/results"], "--output", "--tasks"),
    "compare --eval-data D -o L/runs": (
        ["compare", "--model", "M", "--train-data", "D", "--eval-data", "D", "-o", "L/runs", "--no-kappa"],
        "--output",
        "--train-data",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_an_output_over_an_input_is_refused_before_any_work(world, tmp_path, capsys, monkeypatch, case):
    import st_magnitude.evaluation.runner as runner

    monkeypatch.setattr(runner, "evaluate_folders", lambda *a, **k: pytest.fail("the command started its work"))
    data = tmp_path / "data"
    shutil.copytree(world / "toy", data)
    (tmp_path / "link").symlink_to(data)
    before = _snapshot(data)
    argv, flag, source = CASES[case]
    names = {"M": str(world / "model"), "D": str(data), "L": str(tmp_path / "link")}
    argv = [names[a[0]] + a[1:] if a[:2] in ("D/", "L/") else names.get(a, a) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0] and f"the input {source}" in err[0], err
    assert "no command writes over or inside what it reads" in err[0]
    assert _snapshot(data) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "link"]


def test_scaling_fit_refuses_to_write_its_json_over_the_csv_it_reads(tmp_path, capsys):
    csv = tmp_path / "points.csv"
    csv.write_text("dim,contrastive_entropy\n32,1.0\n64,0.8\n128,0.7\n")
    assert main(["scaling", "fit", str(csv), "-o", str(tmp_path / "." / "points.csv")]) == 2
    err = capsys.readouterr().err
    assert "--output" in err and "is the input CSV" in err
    assert csv.read_text().startswith("dim,")


def test_an_output_beside_the_data_is_not_refused(world, tmp_path, monkeypatch):
    import st_magnitude.evaluation.runner as runner

    monkeypatch.setattr(runner, "evaluate_folders", lambda *a, **k: [{"dataset": "toy", "ndcg@10": 0.5}])
    monkeypatch.setattr(runner, "format_table", lambda rows: "table")
    rows = tmp_path / "toy-rows"  # a name starting like the data folder's is not inside it
    assert main(["evaluate", str(world / "model"), "--data", str(world / "toy"), "-o", str(rows)]) == 0
    assert (rows / "evaluation.json").is_file()


def test_every_declared_input_is_an_option_of_its_command():
    """A typo in ``INPUTS`` would silently protect nothing."""
    import argparse

    top = build_parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))

    def dests(parser) -> set[str]:
        found = set()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for child in action.choices.values():
                    found |= dests(child)
            else:
                found.add(action.dest)
        return found

    declared = 0
    for name in COMMANDS:
        inputs = getattr(importlib.import_module(f"st_magnitude.cli.{name}"), "INPUTS", {})
        assert set(inputs) <= dests(sub.choices[name]), name
        declared += len(inputs)
    assert declared >= 8


def test_an_output_through_a_symlink_loop_is_one_line(world, tmp_path, capsys):
    (tmp_path / "loop").symlink_to("loop")
    rows = tmp_path / "loop" / "rows"
    argv = ["evaluate", str(world / "model"), "--data", str(world / "toy"), "-o", str(rows)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--output" in err[0] and "symlink loop" in err[0], err
