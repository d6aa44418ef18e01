"""A model folder cannot make any command read, write or delete outside it.

Each hostile folder names a path outside itself — a ``modules.json`` entry ``../victim`` or ``/abs/victim``, an unused
Normalize key ``../victim`` in a Router's ``types``, a symlinked module folder — while a *sentinel* folder sits next
to the model. Every command refuses with one line (exit 2) naming the entry, the sentinel survives untouched and the
model folder is left as it was. Before the containment check, ``strip`` deleted the sentinel (exit 0).
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path

import pytest

from st_magnitude._trust.paths import UnsafeModelPathError, check_model_folder, contained
from st_magnitude.cli import main
from st_magnitude.model.convert import strip_normalize
from st_magnitude.model.load import inspect_model_code, load_model


@pytest.fixture(scope="module")
def saved(tiny_bert_dir, tmp_path_factory):
    from conftest import build_tiny_st
    from sentence_transformers import SentenceTransformer

    from st_magnitude import apply_similarity

    root = tmp_path_factory.mktemp("models")
    build_tiny_st(tiny_bert_dir).save(str(root / "plain"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        apply_similarity(SentenceTransformer(str(root / "plain"), device="cpu"), "qnorm").save(str(root / "qnorm"))
    return root


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "sentinel.txt").write_text("keep me")
    (victim / "config.json").write_text("{}")
    return victim


def _set_normalize_path(model: Path, path: str) -> None:
    entries = json.loads((model / "modules.json").read_text())
    assert entries[-1]["type"].endswith("Normalize")
    entries[-1]["path"] = path
    (model / "modules.json").write_text(json.dumps(entries))


def _relative(saved, tmp_path):
    model = tmp_path / "sub" / "m"
    shutil.copytree(saved / "plain", model)
    _set_normalize_path(model, "../../victim")
    return model


def _absolute(saved, tmp_path):
    model = tmp_path / "m"
    shutil.copytree(saved / "plain", model)
    _set_normalize_path(model, str(tmp_path / "victim"))
    return model


def _router_key(saved, tmp_path):
    model = tmp_path / "m"
    shutil.copytree(saved / "qnorm", model)
    cfg = json.loads((model / "router_config.json").read_text())
    cfg["types"]["../victim"] = "sentence_transformers.base.modules.normalize.Normalize"  # unused by any route
    (model / "router_config.json").write_text(json.dumps(cfg))
    return model


def _router_route(saved, tmp_path):
    model = tmp_path / "m"
    shutil.copytree(saved / "qnorm", model)
    cfg = json.loads((model / "router_config.json").read_text())
    norm = cfg["structure"]["query"].pop()
    cfg["types"]["../victim"] = cfg["types"].pop(norm)
    cfg["structure"]["query"].append("../victim")  # a route that walks out
    (model / "router_config.json").write_text(json.dumps(cfg))
    shutil.rmtree(model / norm)
    return model


def _symlink(saved, tmp_path):
    model = tmp_path / "m"
    shutil.copytree(saved / "plain", model)
    shutil.rmtree(model / "2_Normalize")
    os.symlink(tmp_path / "victim", model / "2_Normalize")
    return model


HOSTILE = {
    "modules.json ../../victim": _relative,
    "modules.json absolute path": _absolute,
    "Router types key ../victim": _router_key,
    "Router route ../victim": _router_route,
    "symlinked module folder": _symlink,
}


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): (b"->" + os.readlink(p).encode()) if p.is_symlink() else p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_symlink() or p.is_file()
    }


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_no_command_touches_a_folder_next_to_the_model(kind, saved, tmp_path, capsys):
    victim = _victim(tmp_path)
    model = HOSTILE[kind](saved, tmp_path)
    before, victim_before = _snapshot(model), _snapshot(victim)
    out = tmp_path / "out"
    commands = {
        "strip in place": ["strip", str(model)],
        "strip -o": ["strip", str(model), "-o", str(out / "stripped")],
        "convert": ["convert", str(model), "dot", "-o", str(out / "converted")],
        "convert --trust-remote-code": ["convert", str(model), "dot", "-o", str(out / "c2"), "--trust-remote-code"],
        "inspect": ["inspect", str(model)],
    }
    for name, argv in commands.items():
        rc = main(argv)
        err = capsys.readouterr().err
        assert rc == 2, (name, err)
        assert "outside the model folder" in err and _one_error_line(err), (name, err)
        assert _snapshot(victim) == victim_before, f"{name} touched the folder next to the model ({kind})"
        assert _snapshot(model) == before, f"{name} changed the model folder ({kind})"
        assert not out.exists() or not any(out.iterdir()), f"{name} left {list(out.iterdir())}"
    for call in (
        lambda: strip_normalize(model),
        lambda: strip_normalize(model, tmp_path / "py-out"),
        lambda: load_model(model),
        lambda: load_model(model, trust_remote_code=True),
        lambda: inspect_model_code(str(model)),
    ):
        with pytest.raises(UnsafeModelPathError, match="outside the model folder"):
            call()
    assert _snapshot(victim) == victim_before and _snapshot(model) == before
    assert not (tmp_path / "py-out").exists()
    assert sorted(p.name for p in model.parent.iterdir() if p.name.startswith(".")) == []  # no staging left


def test_a_well_formed_folder_passes_and_still_strips(saved, tmp_path):
    for name in ("plain", "qnorm"):
        model = shutil.copytree(saved / name, tmp_path / name)
        check_model_folder(model)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert strip_normalize(model) == model.absolute()
        assert "Normalize" not in (model / "modules.json").read_text()
        load_model(model)


def test_contained_rejects_each_escape(tmp_path):
    (tmp_path / "inside").mkdir()
    os.symlink(tmp_path.parent, tmp_path / "up")
    assert contained(tmp_path, "inside", "x") == tmp_path / "inside"
    assert contained(tmp_path, "", "x") == tmp_path
    for bad in ("..", "../x", "inside/../../x", "/etc", "up", "up/x", "C:\\x", None, 3, "a\x00b"):
        with pytest.raises(UnsafeModelPathError):
            contained(tmp_path, bad, "entry")


def _one_error_line(err: str) -> bool:
    """One ``st-magnitude CMD: error: ...`` line and no traceback (progress bars of the loaders aside)."""
    return "Traceback" not in err and sum(line.startswith("st-magnitude ") for line in err.splitlines()) == 1


def test_a_hugging_face_cache_snapshot_with_blob_links_passes(tmp_path):
    repo = tmp_path / "models--org--name"
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (repo / "blobs" / "f00d").write_text("{}")
    os.symlink("../../blobs/f00d", snapshot / "config.json")
    check_model_folder(snapshot)
    (repo / "blobs" / "dir").mkdir()
    os.symlink("../../blobs/dir", snapshot / "1_Pooling")  # a folder link is no cache blob
    with pytest.raises(UnsafeModelPathError, match="1_Pooling"):
        check_model_folder(snapshot)
