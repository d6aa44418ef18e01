"""Hostile model folders: what a folder names is checked before anything is imported or unpickled.

- A module type naming one of this package's modules that is not a module class (``st_magnitude.cli.__main__.X``)
  is refused before the module is imported; importing ``cli/__main__`` used to run the CLI with the caller's argv and
  raise ``SystemExit`` out of ``load_model``.
- A ``sentence_transformers.*`` type that is not a module class (``sentence_transformers.base.model.pickle``, i.e.
  the ``pickle`` module) is one clear error, not ``TypeError: load() takes at most 5 arguments``.
- A pickle ``pytorch_model.bin`` (at the root or in a Dense folder) whose payload would run ``os.system`` is refused
  by torch's ``weights_only`` load: one line, exit 2, and the payload never runs.
- No module of the package does anything when imported (checked in a fresh interpreter with a hostile argv).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from st_magnitude.cli import main
from st_magnitude.model.load import RemoteCodeError, load_model

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def saved(tiny_bert_dir, tmp_path_factory):
    from conftest import build_tiny_st
    from sentence_transformers.base.modules import Dense

    root = tmp_path_factory.mktemp("models")
    model = build_tiny_st(tiny_bert_dir, normalize=False)
    model.append(Dense(32, 8))
    model.save(str(root / "dense"))
    return root / "dense"


def _with_type(saved: Path, tmp_path: Path, ref: str) -> Path:
    model = shutil.copytree(saved, tmp_path / "m")
    entries = json.loads((model / "modules.json").read_text())
    entries.append({"idx": len(entries), "name": str(len(entries)), "path": "", "type": ref})
    (model / "modules.json").write_text(json.dumps(entries))
    return model


def test_a_package_module_that_is_no_module_class_is_not_imported(saved, tmp_path, monkeypatch, capsys):
    model = _with_type(saved, tmp_path, "st_magnitude.cli.__main__.Evil")
    monkeypatch.delitem(sys.modules, "st_magnitude.cli.__main__", raising=False)
    monkeypatch.setattr(sys, "argv", ["victim-program", "strip", str(tmp_path / "nothing")])
    with pytest.raises(RemoteCodeError, match=r"st_magnitude\.cli\.__main__\.Evil"):
        load_model(model)
    assert main(["inspect", str(model)]) == 2
    assert "--trust-remote-code" in capsys.readouterr().err
    assert "st_magnitude.cli.__main__" not in sys.modules  # checked against the class list, never imported


@pytest.mark.parametrize("trust", [False, True])
def test_a_sentence_transformers_path_that_is_no_module_class_is_one_clear_error(saved, tmp_path, trust, capsys):
    model = _with_type(saved, tmp_path, "sentence_transformers.base.model.pickle")
    with pytest.raises(ValueError, match="not a sentence-transformers module class"):
        load_model(model, trust_remote_code=trust)
    argv = ["inspect", str(model)] + (["--trust-remote-code"] if trust else [])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "sentence_transformers.base.model.pickle" in err and _one_error_line(err)


class _Payload:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("where", ["root", "Dense folder"])
def test_a_pickle_weights_file_is_refused_in_one_line_and_never_run(saved, tmp_path, where, capsys):
    model = shutil.copytree(saved, tmp_path / "m")
    marker = tmp_path / "payload-ran"
    folder = model if where == "root" else model / "2_Dense"
    (folder / "model.safetensors").unlink()
    torch.save({"weight": _Payload(marker)}, folder / "pytorch_model.bin")
    for trust in ([], ["--trust-remote-code"]):
        assert main(["inspect", str(model), *trust]) == 2
        err = capsys.readouterr().err
        assert "pickle that torch refuses to load safely" in err and _one_error_line(err), err
        assert main(["convert", str(model), "dot", "-o", str(tmp_path / "out"), *trust]) == 2
        capsys.readouterr()
    with pytest.raises(ValueError, match="re-save it with model.save"):
        load_model(model)
    assert not marker.exists() and not (tmp_path / "out").exists()


def test_own_classes_listed_are_the_module_classes_the_package_saves():
    from sentence_transformers.base.modules import Module

    import st_magnitude.modules as modules
    from st_magnitude.modules import MODULE_CLASSES

    saved_classes = {
        f"{cls.__module__}.{cls.__name__}"
        for name in modules.__all__
        if isinstance(cls := getattr(modules, name), type) and issubclass(cls, Module)
    }
    assert MODULE_CLASSES == saved_classes
    from st_magnitude.model.load import _own_class

    assert all(_own_class(ref) is not None for ref in MODULE_CLASSES)


_IMPORT_ALL = r"""
import importlib, io, os, pkgutil, sys, warnings
warnings.simplefilter("ignore")
sys.argv = ["victim-program", "strip", os.path.join(os.getcwd(), "no-such-model"), "-o", "should-not-appear"]
out, err = io.StringIO(), io.StringIO()
sys.stdout, sys.stderr = out, err
import st_magnitude
failures = []
for info in pkgutil.walk_packages(st_magnitude.__path__, "st_magnitude."):
    try:
        importlib.import_module(info.name)
    except SystemExit as exc:
        failures.append(f"{info.name}: SystemExit({exc.code})")
    except ModuleNotFoundError as exc:
        if (exc.name or "").startswith("st_magnitude"):
            failures.append(f"{info.name}: {exc!r}")
    except Exception as exc:
        failures.append(f"{info.name}: {exc!r}")
sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
print(repr((failures, out.getvalue(), err.getvalue(), sorted(os.listdir()))))
"""


@pytest.mark.slow  # imports every module (torch, transformers, mteb) in a fresh interpreter: ~20 s
def test_no_package_module_does_anything_when_imported(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORT_ALL], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    failures, out, err, files = eval(proc.stdout.strip().splitlines()[-1])  # noqa: S307 - our own repr
    assert failures == [] and out == "" and files == [], (failures, out, err, files)
    assert "st-magnitude" not in err, err  # the CLI did not run with the hostile argv


def _one_error_line(err: str) -> bool:
    """One ``st-magnitude CMD: error: ...`` line and no traceback (progress bars of the loaders aside)."""
    return "Traceback" not in err and sum(line.startswith("st-magnitude ") for line in err.splitlines()) == 1
