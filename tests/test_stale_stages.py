"""A killed ``convert`` (``.OUT.save-XXXXXXXX``) or ``strip`` (``.OUT.strip-XXXXXXXX``) leaves its staging folder
beside the output; the next run writing the same output removes it (the flock its owner held on it was released by
the kernel), and leaves alone a staging folder whose run still holds it, another output's, and a symlink named
like one. The rule is the one ``export`` follows for its ``.OUT.XXXXXXXX.partial`` folders, from the same code.

Before, every killed convert or strip left its staging folder for good.
"""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path

import pytest


def _stage(folder: Path, name: str) -> Path:
    stage = folder / name
    (stage / "1_Pooling").mkdir(parents=True)
    (stage / "model.safetensors").write_bytes(b"half a model")
    return stage


def _plant(folder: Path, kind: str) -> tuple[dict[str, Path], int]:
    """A stale stage of ``out``, a running one (held), another output's, and a symlink named like one."""
    stages = {
        "stale": _stage(folder, f".out.{kind}k1ll3d_9"),
        "live": _stage(folder, f".out.{kind}runn1ng0"),
        "other": _stage(folder, f".out.y.{kind}k1ll3d_9"),
        "victim": _stage(folder, "victim"),
    }
    (folder / f".out.{kind}s1mlink0").symlink_to(stages["victim"])
    fd = os.open(stages["live"], os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return stages, fd


def _check(folder: Path, stages: dict[str, Path], kind: str, caplog) -> None:
    assert not stages["stale"].exists()
    assert stages["live"].exists() and stages["other"].exists()
    assert (stages["victim"] / "model.safetensors").read_bytes() == b"half a model"
    assert (folder / f".out.{kind}s1mlink0").is_symlink()
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [f".out.{kind}runn1ng0", f".out.y.{kind}k1ll3d_9", f".out.{kind}s1mlink0", "victim", "out", "m"]
    )
    assert any(str(stages["stale"]) in r.getMessage() and "killed" in r.getMessage() for r in caplog.records)


@pytest.fixture
def plain(tiny_model, tmp_path) -> Path:
    path = tmp_path / "m"
    tiny_model.save(str(path))
    return path


def test_the_next_convert_removes_what_a_killed_convert_left(tiny_model, plain, tmp_path, caplog):
    from st_magnitude.model._save import save_model

    stages, fd = _plant(tmp_path, "save-")
    try:
        with caplog.at_level(logging.WARNING):
            save_model(tiny_model, tmp_path / "out")
    finally:
        os.close(fd)
    assert (tmp_path / "out" / "modules.json").is_file()
    _check(tmp_path, stages, "save-", caplog)


def test_the_next_strip_removes_what_a_killed_strip_left(plain, tmp_path, caplog):
    import warnings

    from st_magnitude.model.convert import strip_normalize

    stages, fd = _plant(tmp_path, "strip-")
    try:
        with caplog.at_level(logging.WARNING), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            strip_normalize(plain, output_path=tmp_path / "out")
    finally:
        os.close(fd)
    assert (tmp_path / "out" / "modules.json").is_file()
    _check(tmp_path, stages, "strip-", caplog)
