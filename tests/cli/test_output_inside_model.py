"""No command writes into the model it reads: an output file or folder inside an input model folder (or the model
folder itself, however the path is spelled) is refused in one line before any work, and the model is left as it was.

Before, ``evaluate --json MODEL/modules.json`` overwrote the model it evaluated (exit 0), ``strip MODEL -o
MODEL/x/..`` ended in a huge ``shutil.Error`` and left ``x/`` in the model, and ``convert … -o MODEL/sub/..`` failed
with ``Directory not empty`` after the whole conversion, leaving ``sub/``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers.toy_beir import write_model_and_toy

from st_magnitude.cli import main


@pytest.fixture(scope="module")
def world(tiny_bert_dir, tmp_path_factory):
    return write_model_and_toy(tmp_path_factory.mktemp("inside_model"), tiny_bert_dir)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b"/" for p in sorted(folder.rglob("*"))}


#: command line (M: the model folder, T: the toy BEIR folder) -> the option the refusal names
CASES = {
    "evaluate -o M": (["evaluate", "M", "--data", "T", "-o", "M"], "--output"),
    "evaluate -o M/sub": (["evaluate", "M", "--data", "T", "-o", "M/sub"], "--output"),
    "diagnose -o M/report": (["diagnose", "M", "--data", "T", "--no-kappa", "-o", "M/report"], "--output"),
    "diagnose -o M": (["diagnose", "M", "--data", "T", "--no-kappa", "-o", "M"], "--output"),
    "strip -o M/x/..": (["strip", "M", "-o", "M/x/.."], "--output"),
    "convert -o M/sub/..": (["convert", "M", "qnorm", "-o", "M/sub/.."], "--output"),
    "convert -o M/converted": (["convert", "M", "qnorm", "-o", "M/converted"], "--output"),
    "export -o M/onnx": (["export", "M", "-o", "M/onnx"], "--output"),
    "calibrate --output M/1_Pooling": (["calibrate", "M", "--data", "T", "--output", "M/1_Pooling"], "--output"),
    "mteb run -o M/results": (["mteb", "run", "-m", "M", "-t", "T", "-o", "M/results"], "--output"),
    "mteb run --prediction-folder M/p": (
        ["mteb", "run", "-m", "M", "-t", "T", "-o", "R", "--prediction-folder", "M/p"],
        "--prediction-folder",
    ),
    "compare -o M/runs": (
        ["compare", "--model", "M", "--train-data", "T", "--eval-data", "T", "-o", "M/runs", "--no-kappa"],
        "--output",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_output_inside_the_model_is_refused_before_any_work(world, tmp_path, capsys, case):
    model = tmp_path / "model"
    shutil.copytree(world / "model", model)
    before = _snapshot(model)
    argv, flag = CASES[case]
    names = {"M": str(model), "T": str(world / "toy"), "R": str(tmp_path / "results")}
    argv = [names[a[0]] + a[1:] if a[:2] in ("M/", "T/") else names.get(a, a) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0] and "inside the model folder" in err[0], err
    assert _snapshot(model) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no results folder either


def test_calibrate_still_saves_into_the_model_folder_it_is_given(world):
    from st_magnitude._trust.outputs import check_outside_model

    check_outside_model(world / "model", world / "model", "--output", may_be_the_model=True)
    with pytest.raises(ValueError, match="--output .* is the model folder"):
        check_outside_model(world / "model", world / "model" / "x" / "..", "--output")
