"""No code outside sentence-transformers and st-magnitude runs without the user's word.

A model folder that names a foreign class in ``modules.json`` (or in a Router's ``router_config.json``), or custom
modeling code in a ``config.json`` ``auto_map``, ships a module that creates a marker file when imported. Every
command that loads a model refuses it without ``--trust-remote-code``, says how to opt in, and the marker never
appears; with the flag (Python: ``trust_remote_code=True``) the code is imported — which proves the marker works.
A learnable model of ours (``RoleNormalize``) loads without the flag.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest

from st_magnitude import apply_similarity
from st_magnitude.cli import main
from st_magnitude.evaluation.runner import evaluate_folders
from st_magnitude.model.load import RemoteCodeError, inspect_model_code, load_model

pytestmark = pytest.mark.toy_beir(n_docs=12, n_queries=4, train_seed=0)


def _evil_module(marker: Path) -> str:
    return f"from pathlib import Path\nPath({str(marker)!r}).write_text('imported')\n"


@pytest.fixture(scope="module")
def saved(tiny_bert_dir, tmp_path_factory):
    from conftest import build_tiny_st

    path = tmp_path_factory.mktemp("models") / "plain"
    build_tiny_st(tiny_bert_dir).save(str(path))
    return path


def _foreign_module(saved: Path, tmp_path: Path) -> tuple[Path, Path]:
    model, marker = tmp_path / "evil_module", tmp_path / "marker_module"
    shutil.copytree(saved, model)
    (model / "evilmod.py").write_text(_evil_module(marker))
    entries = json.loads((model / "modules.json").read_text())
    entries.append({"idx": len(entries), "name": str(len(entries)), "path": "", "type": "evilmod.Evil"})
    (model / "modules.json").write_text(json.dumps(entries))
    return model, marker


def _auto_map(saved: Path, tmp_path: Path) -> tuple[Path, Path]:
    model, marker = tmp_path / "evil_auto_map", tmp_path / "marker_auto_map"
    shutil.copytree(saved, model)
    (model / "evilmodeling.py").write_text(_evil_module(marker))
    cfg = json.loads((model / "config.json").read_text())
    cfg["auto_map"] = {"AutoConfig": "evilmodeling.EvilConfig", "AutoModel": "evilmodeling.EvilModel"}
    (model / "config.json").write_text(json.dumps(cfg))
    return model, marker


def _foreign_in_router(saved: Path, tmp_path: Path) -> tuple[Path, Path]:
    from sentence_transformers import SentenceTransformer

    model, marker = tmp_path / "evil_router", tmp_path / "marker_router"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        apply_similarity(SentenceTransformer(str(saved), device="cpu"), "qnorm").save(str(model))
    router_dir = model / next(e["path"] for e in json.loads((model / "modules.json").read_text()))
    cfg = json.loads((router_dir / "router_config.json").read_text())
    key = next(iter(cfg["types"]))
    cfg["types"][key] = "evilmod.Evil"
    (router_dir / "router_config.json").write_text(json.dumps(cfg))
    (model / "evilmod.py").write_text(_evil_module(marker))
    return model, marker


EVIL = {"modules.json class": _foreign_module, "config auto_map": _auto_map, "Router class": _foreign_in_router}


def _commands(model: Path, toy: Path, out: Path) -> dict[str, list[str]]:
    m = str(model)
    return {
        "evaluate": ["evaluate", m, "--data", str(toy)],
        "diagnose": ["diagnose", m, "--data", str(toy), "--no-kappa", "--output", str(out / "diag")],
        "convert": ["convert", m, "dot", "-o", str(out / "converted")],
        "inspect": ["inspect", m],
        "compare": [
            "compare",
            "--model",
            m,
            "--train-data",
            str(toy),
            "--eval-data",
            str(toy),
            "--output",
            str(out / "compare"),
            "--steps",
            "1",
            "--no-kappa",
            "--device",
            "cpu",
        ],
        "mteb run": ["mteb", "run", "-m", m, "-t", str(toy), "--output", str(out / "mteb")],
    }


@pytest.mark.parametrize("kind", list(EVIL))
def test_every_command_refuses_foreign_code_and_imports_nothing(kind, saved, toy, tmp_path, capsys):
    model, marker = EVIL[kind](saved, tmp_path)
    out = tmp_path / "out"
    for name, argv in _commands(model, toy, out).items():
        rc = main(argv)
        err = capsys.readouterr().err
        assert rc == 2, (name, err)
        assert "--trust-remote-code" in err and "Traceback" not in err, (name, err)
        assert not marker.exists(), f"{name} imported the model's code ({kind})"
        assert not out.exists() or not any(out.iterdir()), f"{name} left {list(out.iterdir())}"
    with pytest.raises(RemoteCodeError, match="trust_remote_code=True"):
        load_model(model)
    with pytest.raises(RemoteCodeError):
        evaluate_folders(model, [toy])
    assert not marker.exists()


@pytest.mark.parametrize("kind", list(EVIL))
def test_the_marker_appears_with_consent(kind, saved, tmp_path):
    # the refusal above is meaningful only if loading *with* consent does import the code
    model, marker = EVIL[kind](saved, tmp_path)
    try:
        load_model(model, trust_remote_code=True)
    except Exception:  # noqa: BLE001 - the evil class is not a working module; importing it is what counts
        pass
    assert marker.exists()


def test_inspect_model_code_reports_without_importing(saved, tmp_path):
    model, marker = _foreign_module(saved, tmp_path)
    report = inspect_model_code(str(model))
    assert report["foreign"] == ["evilmod.Evil (modules.json)"] and report["auto_map"] == []
    assert not marker.exists()
    assert inspect_model_code(str(saved)) == {"own": {}, "foreign": [], "auto_map": [], "checked": True}


def test_a_class_that_only_claims_to_be_ours_is_refused(saved, tmp_path):
    model = tmp_path / "fake_own"
    shutil.copytree(saved, model)
    entries = json.loads((model / "modules.json").read_text())
    entries.append({"idx": 3, "name": "3", "path": "", "type": "st_magnitude.no_such_module.Evil"})
    (model / "modules.json").write_text(json.dumps(entries))
    with pytest.raises(RemoteCodeError, match="st_magnitude.no_such_module.Evil"):
        load_model(model)


def test_learnable_model_of_ours_loads_without_the_flag(saved, toy, tmp_path, capsys):
    from sentence_transformers import SentenceTransformer

    path = tmp_path / "learnable"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        apply_similarity(SentenceTransformer(str(saved), device="cpu"), "learnable").save(str(path))
    with pytest.raises(ValueError, match="trust_remote_code"):  # stock ST refuses it ...
        SentenceTransformer(str(path), device="cpu")
    model = load_model(path)  # ... our loader allows exactly our own module
    assert [type(m).__name__ for m in model][-1] == "RoleNormalize"
    assert main(["inspect", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["modules"][-1] == "RoleNormalize"
    assert main(["evaluate", str(path), "--data", str(toy)]) == 0
