"""In-place ``strip`` keeps a complete model at the model's path at every instant.

The observer wraps every call that moves or deletes a folder (``os.rename``, ``os.replace``, ``shutil.rmtree``, the
atomic exchange) and, after each one, checks that the model path holds a complete model (``modules.json`` and every
folder it names). A kill can only land between two such calls, so this is what a kill at any point leaves. Swapping
by two renames failed it (after the first rename the model path was empty). Where no atomic swap exists, in-place
strip is refused with the reason and the folder is untouched.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path

import pytest

import st_magnitude.model.convert as convert
from st_magnitude.cli import main
from st_magnitude.model._swap import AtomicSwapUnavailable, exchange


@pytest.fixture
def plain(tiny_model, tmp_path) -> Path:
    path = tmp_path / "m"
    tiny_model.save(str(path))
    return path


def _complete(model: Path) -> bool:
    if not (model / "modules.json").is_file():
        return False
    return all((model / e["path"]).is_dir() for e in json.loads((model / "modules.json").read_text()))


def test_the_model_path_is_complete_after_every_step(plain, monkeypatch):
    steps: list[str] = []

    def observed(name, fn):
        def wrapper(*args, **kwargs):
            result = fn(*args, **kwargs)
            steps.append(name)
            assert _complete(plain), f"after {name}{args}: {plain} is not a complete model"
            return result

        return wrapper

    monkeypatch.setattr(os, "rename", observed("os.rename", os.rename))
    monkeypatch.setattr(os, "replace", observed("os.replace", os.replace))
    monkeypatch.setattr(shutil, "rmtree", observed("shutil.rmtree", shutil.rmtree))
    monkeypatch.setattr(convert, "exchange", observed("exchange", exchange))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        convert.strip_normalize(plain)
    assert "exchange" in steps
    assert "Normalize" not in (plain / "modules.json").read_text()
    assert [p.name for p in plain.parent.iterdir()] == ["m"]  # the old copy is gone


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_without_an_atomic_swap_in_place_is_refused_with_the_reason(plain, monkeypatch, capsys):
    def unavailable(a, b):
        raise AtomicSwapUnavailable(38, "this file system cannot swap folders atomically")

    monkeypatch.setattr(convert, "exchange", unavailable)
    before = (plain / "modules.json").read_text()
    assert main(["strip", str(plain)]) == 2
    err = capsys.readouterr().err
    assert "cannot strip" in err and "--output" in err and _one_error_line(err)
    assert (plain / "modules.json").read_text() == before
    assert [p.name for p in plain.parent.iterdir()] == ["m"]
    assert main(["strip", str(plain), "-o", str(plain.parent / "copy")]) == 0  # the way out it names works
    assert "Normalize" not in (plain.parent / "copy" / "modules.json").read_text()


def test_exchange_swaps_two_folders(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "x").write_text("a")
    (b / "x").write_text("b")
    exchange(a, b)
    assert (a / "x").read_text() == "b" and (b / "x").read_text() == "a"
    with pytest.raises(OSError):
        exchange(a, tmp_path / "missing")


def _one_error_line(err: str) -> bool:
    """One ``st-magnitude CMD: error: ...`` line and no traceback (progress bars of the loaders aside)."""
    return "Traceback" not in err and sum(line.startswith("st-magnitude ") for line in err.splitlines()) == 1
