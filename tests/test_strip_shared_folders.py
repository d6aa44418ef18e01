"""``strip`` deletes a dropped Normalize's folder only when it is a folder of its own inside the model.

A Normalize entry whose ``path`` is ``.`` or ``./`` names the model folder itself; one whose ``path`` is the kept
Pooling's ``1_Pooling`` shares that folder. Before the check, ``strip`` (in place and ``-o``) deleted the whole model
in the first case (exit 0, one file left) and the kept Pooling in the second (the result failed to load). Now each
is refused in one line before anything is written: the folder stays byte for byte, no output and no staging folder
is left, and a well-formed folder (its Normalize in ``2_Normalize``) still strips.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest

from st_magnitude._trust import InputFileError
from st_magnitude.cli import main
from st_magnitude.model.convert import strip_normalize
from st_magnitude.model.load import load_model

NORMALIZE = "sentence_transformers.base.modules.normalize.Normalize"


@pytest.fixture(scope="module")
def saved(tiny_bert_dir, tmp_path_factory):
    from conftest import build_tiny_st

    from st_magnitude import apply_similarity

    root = tmp_path_factory.mktemp("models")
    build_tiny_st(tiny_bert_dir).save(str(root / "plain"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        apply_similarity(build_tiny_st(tiny_bert_dir), "qnorm").save(str(root / "qnorm"))
    return root


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _with_entries(saved: Path, tmp_path: Path, name: str, edit) -> Path:
    model = shutil.copytree(saved / name, tmp_path / "holder" / "m")
    entries = json.loads((model / "modules.json").read_text())
    edit(entries)
    (model / "modules.json").write_text(json.dumps(entries))
    return model


def _normalize_path(path: str):
    def edit(entries):
        assert entries[-1]["type"] == NORMALIZE
        entries[-1]["path"] = path

    return edit


def _append_normalize(path: str):
    return lambda entries: entries.append({"idx": len(entries), "name": "n", "path": path, "type": NORMALIZE})


CASES = {
    "path .": ("plain", _normalize_path("."), "names the model folder itself"),
    "path ./": ("plain", _normalize_path("./"), "names the model folder itself"),
    "path 0_x/..": ("plain", _normalize_path("0_x/.."), "names the model folder itself"),
    "shares the kept Pooling": ("plain", _normalize_path("1_Pooling"), "is the folder '1_Pooling'"),
    "reaches the Pooling by ..": ("plain", _normalize_path("2_Normalize/../1_Pooling"), "is the folder '1_Pooling'"),
    "inside the kept Pooling": ("plain", _normalize_path("1_Pooling/sub"), "lies inside the folder '1_Pooling'"),
    "shares a Router key's folder": ("qnorm", _append_normalize("query_1_Pooling"), "query_1_Pooling"),
    "shares the Router's Transformer": ("qnorm", _append_normalize("query_0_Transformer"), "query_0_Transformer"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_dropped_normalize_never_deletes_a_folder_the_model_uses(case, saved, tmp_path, capsys):
    name, edit, message = CASES[case]
    model = _with_entries(saved, tmp_path, name, edit)
    if case == "inside the kept Pooling":
        (model / "1_Pooling" / "sub").mkdir()
        (model / "1_Pooling" / "sub" / "part.json").write_text("{}")
    before = _snapshot(model)
    out = tmp_path / "out"
    for argv in (["strip", str(model), "-o", str(out)], ["strip", str(model)]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert message in err and "modules.json" in err and len(err.strip().splitlines()) == 1, err
        assert _snapshot(model) == before, f"{argv} changed the model folder"
        assert not out.exists()
        assert [p.name for p in model.parent.iterdir()] == ["m"]  # no staging folder left
    for call in (lambda: strip_normalize(model), lambda: strip_normalize(model, tmp_path / "py-out")):
        with pytest.raises(InputFileError, match=message):
            call()
    assert _snapshot(model) == before and not (tmp_path / "py-out").exists()


def test_two_dropped_normalize_entries_sharing_one_folder_are_refused(saved, tmp_path, capsys):
    model = _with_entries(saved, tmp_path, "plain", _append_normalize("2_Normalize"))
    before = _snapshot(model)
    assert main(["strip", str(model)]) == 2
    assert "is the folder '2_Normalize'" in capsys.readouterr().err
    assert _snapshot(model) == before


def test_a_module_type_that_is_not_a_string_is_one_line(saved, tmp_path, capsys):
    def edit(entries):
        entries[-1]["type"] = 5

    model = _with_entries(saved, tmp_path, "plain", edit)
    before = _snapshot(model)
    assert main(["strip", str(model)]) == 2
    err = capsys.readouterr().err
    assert "modules.json: entry 2 key 'type': must be a string, got an integer 5" in err, err
    assert _snapshot(model) == before


@pytest.mark.parametrize("name", ["plain", "qnorm"])
def test_a_well_formed_folder_still_strips_and_loads(name, saved, tmp_path):
    model = shutil.copytree(saved / name, tmp_path / name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        strip_normalize(model, tmp_path / "copy")
        strip_normalize(model)
    for folder in (model, tmp_path / "copy"):
        assert "Normalize" not in (folder / "modules.json").read_text()
        assert not list(folder.rglob("*Normalize*"))  # the dropped folders are gone, the others are all there
        assert load_model(folder).encode_document(["a b"]).shape == (1, 32)
