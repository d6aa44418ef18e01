"""An output path spelled through a folder and back (``OUT/sub/..``) means the folder it resolves to: a folder that
is not empty is refused in one line before any work, an empty one receives the output, and no ``sub/`` is left.

Before, ``strip MODEL -o full/x/..`` and ``convert … -o empty/sub/..`` ended in ``Directory not empty`` after the
whole conversion (the emptiness check and the final rename took ``…/x/..`` as written), and ``export -o full/z/..``
was refused only after loading the model.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from st_magnitude.cli import main


@pytest.fixture(scope="module")
def model(tiny_bert_dir, tmp_path_factory):
    from conftest import build_tiny_st

    path = tmp_path_factory.mktemp("dotdot") / "model"
    build_tiny_st(tiny_bert_dir).save(str(path))
    return str(path)


def _tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize(
    "argv",
    [
        ["strip", "M", "-o", "full/x/.."],
        ["convert", "M", "qnorm", "-o", "full/x/.."],
        ["export", "M", "-o", "full/x/.."],
    ],
    ids=["strip", "convert", "export"],
)
def test_a_path_back_to_a_folder_that_is_not_empty_is_one_line_before_any_work(model, tmp_path, capsys, argv):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "a.txt").write_text("a")
    capsys.readouterr()
    argv = [model if a == "M" else str(tmp_path / a) if a.startswith("full") else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "full/x/..' exists and is not empty" in err[0], err
    assert _tree(tmp_path) == ["full", "full/a.txt"]


@pytest.mark.parametrize("command", [["strip"], ["convert", "qnorm"]], ids=["strip", "convert"])
def test_a_path_back_to_an_empty_folder_writes_the_model_there(model, tmp_path, command):
    (tmp_path / "empty").mkdir()
    out = tmp_path / "empty" / "sub" / ".."
    assert main([command[0], model, *command[1:], "-o", str(out)]) == 0
    assert (tmp_path / "empty" / "modules.json").is_file()
    assert not (tmp_path / "empty" / "sub").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["empty"]
