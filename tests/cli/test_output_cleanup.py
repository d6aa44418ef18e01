"""A failed or interrupted run takes back only the folders it created, never a folder that existed before it.

The cleanup rule (:func:`st_magnitude._trust.outputs.removed_on_failure`) decides what the run created from the
resolved path: ``-o keep/new/..`` names ``keep`` once ``keep/new`` exists, so a cleanup that trusted the path as
written removed ``keep`` with everything in it; ``-o MODEL/x/..`` aimed it at the model. Failures are injected
(monkeypatch) after the command created its output, so no real model is trained or evaluated.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.toy_beir import write_toy_beir

from st_magnitude._trust.outputs import removed_on_failure
from st_magnitude.cli import main


@pytest.fixture(scope="module")
def world(tiny_bert_dir, tmp_path_factory):
    from conftest import build_tiny_st

    root = tmp_path_factory.mktemp("cleanup")
    build_tiny_st(tiny_bert_dir).save(str(root / "model"))
    write_toy_beir(root / "toy", n_docs=12, n_queries=4)
    return root


def _precious(folder: Path) -> dict[str, str]:
    """A folder the user had before the run: a file and a sub-folder."""
    folder.mkdir(parents=True)
    (folder / "notes.txt").write_text("precious")
    (folder / "sub").mkdir()
    (folder / "sub" / "y.txt").write_text("y")
    return _snapshot(folder)


def _snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b"/" for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("failure", [ValueError("boom"), KeyboardInterrupt()], ids=["error", "Ctrl-C"])
def test_a_path_through_a_new_folder_and_back_removes_only_the_new_folder(tmp_path, failure):
    before = _precious(tmp_path / "keep")
    with pytest.raises(type(failure)), removed_on_failure(tmp_path / "keep" / "new" / ".."):
        (tmp_path / "keep" / "new" / "..").mkdir(parents=True, exist_ok=True)  # os.makedirs creates keep/new
        (tmp_path / "keep" / "report.md").write_text("half")
        raise failure
    assert _snapshot(tmp_path / "keep") == {**before, "report.md": b"half"}  # nothing of the user's removed


def test_a_new_folder_beside_a_path_back_is_removed_with_the_one_between(tmp_path):
    before = _precious(tmp_path / "keep")
    out = tmp_path / "keep" / "new" / ".." / "new2"
    with pytest.raises(ValueError), removed_on_failure(out):
        out.mkdir(parents=True, exist_ok=True)  # as every writer of the package: the cleanup rule made keep/new2
        (out / "report.md").write_text("half")
        raise ValueError("boom")
    assert _snapshot(tmp_path / "keep") == before


def test_an_output_through_a_symlink_to_an_existing_folder_is_kept(tmp_path):
    before = _precious(tmp_path / "keep")
    (tmp_path / "link").symlink_to(tmp_path / "keep")
    with pytest.raises(ValueError), removed_on_failure(tmp_path / "link"):
        raise ValueError("boom")
    assert _snapshot(tmp_path / "keep") == before


@pytest.mark.parametrize("where", ["beside", "model"])
def test_a_failed_diagnose_keeps_the_folder_its_output_path_leads_back_to(world, tmp_path, monkeypatch, capsys, where):
    import shutil

    import st_magnitude.diagnostics.report as report

    def fail(*args, **kwargs):
        raise ValueError("simulated failure mid-run")

    monkeypatch.setattr(report, "_diagnose_dataset", fail)
    if where == "model":
        keep = tmp_path / "model"
        shutil.copytree(world / "model", keep)
        before = _snapshot(keep)
    else:
        keep = tmp_path / "keep"
        before = _precious(keep)
    model = str(keep if where == "model" else world / "model")
    out = str(keep / "new" / "..")
    assert main(["diagnose", model, "--data", str(world / "toy"), "--no-kappa", "-o", out]) == 2
    # the model's own folder is refused before any work; any other is kept by the cleanup after the failure
    expected = "is the model folder" if where == "model" else "simulated failure mid-run"
    assert expected in capsys.readouterr().err
    assert _snapshot(keep) == before


def test_a_failed_mteb_run_keeps_the_folder_its_output_path_leads_back_to(world, tmp_path, monkeypatch, capsys):
    from st_magnitude.evaluation import mteb as our_mteb

    def fail(argv, **kwargs):  # mteb makes its results folder (os.makedirs), then fails
        out = argv[argv.index("--output-folder") + 1]
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "results.json").write_text("{")
        raise ValueError("simulated failure mid-run")

    monkeypatch.setattr(our_mteb, "mteb_cli", fail)
    keep = tmp_path / "keep"
    before = _precious(keep)
    argv = ["mteb", "run", "-m", str(world / "model"), "-t", str(world / "toy"), "-o", str(keep / "new" / "..")]
    assert main(argv) == 2
    assert "simulated failure mid-run" in capsys.readouterr().err
    assert _snapshot(keep) == {**before, "results.json": b"{"}


#: The option names (``dest``) under which a command writes: each must be declared in the command's ``OUTPUTS``.
WRITES = {"output", "json", "results", "prediction_folder", "report"}


def _writing_options(parser) -> set[str]:
    import argparse

    found = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= _writing_options(sub)
        elif action.dest in WRITES:
            found.add(action.dest)
    return found


def test_every_command_that_writes_declares_its_outputs_for_the_one_cleanup_rule():
    import argparse
    import importlib

    from st_magnitude.cli import COMMANDS, OUTPUT_KINDS, build_parser

    top = build_parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    declared = {}
    for name in COMMANDS:
        writes = _writing_options(sub.choices[name])
        outputs = getattr(importlib.import_module(f"st_magnitude.cli.{name}"), "OUTPUTS", {})
        assert set(outputs) == writes, name
        assert set(outputs.values()) <= set(OUTPUT_KINDS), name
        declared[name] = outputs
    assert declared["diagnose"] == {"output": "folder"}  # the table is not empty by accident


def test_a_full_disk_in_convert_leaves_none_of_the_folders_made_for_its_output(world, tmp_path, monkeypatch, capsys):
    import errno

    from sentence_transformers import SentenceTransformer

    def full_disk(self, path, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(SentenceTransformer, "save", full_disk)
    out = tmp_path / "new1" / "new2" / "out"
    assert main(["convert", str(world / "model"), "qnorm", "-o", str(out)]) == 2
    assert "no space left" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_writing_evaluate_rows_leaves_none_of_the_folders_made_for_it(
    world, tmp_path, monkeypatch, capsys
):
    import errno

    import st_magnitude._trust.write as write
    import st_magnitude.evaluation.runner as runner

    def full_disk(obj, fh, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(runner, "evaluate_folders", lambda *a, **k: [{"dataset": "toy", "ndcg@10": 0.5}])
    monkeypatch.setattr(runner, "format_table", lambda rows: "table")
    monkeypatch.setattr(write.json, "dump", full_disk)
    rows = tmp_path / "new" / "sub"
    assert main(["evaluate", str(world / "model"), "--data", str(world / "toy"), "-o", str(rows)]) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
