"""A killed ``convert`` (``.OUT.save-XXXXXXXX``), ``strip`` (``.OUT.strip-XXXXXXXX``) or ``export``
(``.OUT.XXXXXXXX.partial``) leaves its staging folder beside the output; the next run writing the same output removes
it, and only it: a stage carries a marker the package wrote inside it when it made it, naming the run kind and the
stage's own ``(st_dev, st_ino)``. Everything else named like a stage is named in a warning and left alone: a stage
whose run still holds it, another output's, a symlink, a user's folder such as ``.backup.save-20261201`` (a date
fits the eight random characters), a user's folder holding a marker copied from a real stage, a marker that is a
hard link, a stage on another device (a mount point).

Before, every unheld folder of such a name was removed with all it held: ``convert MODEL qnorm -o backup`` deleted
the user's ``.backup.save-20261201/thesis.txt``.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
from pathlib import Path

import pytest
from helpers.stages import killed_stage

from st_magnitude._trust.stages import MARKER, held_stage, remove_stale_stages


def _user_folder(folder: Path, name: str) -> Path:
    """A user's folder that happens to be named like a stage, holding their only copy of something."""
    mine = folder / name
    mine.mkdir()
    (mine / "thesis.txt").write_text("my only copy")
    return mine


def _plant(folder: Path, kind: str, run: str) -> tuple[dict[str, Path], int]:
    """A stale stage of ``out`` (a killed run's), a running one (held), another output's, a symlink named like one,
    a user's folder named like one, and one holding a marker copied from a real stage."""
    stale = killed_stage(folder / "out", infix=kind, run=run)
    copied_from = killed_stage(folder / "other", infix=kind, run=run)
    stages = {
        "stale": stale,
        "live": _user_folder(folder, f".out.{kind}runn1ng0"),
        "other": _user_folder(folder, f".out.y.{kind}k1ll3d_9"),
        "victim": _user_folder(folder, "victim"),
        "dated": _user_folder(folder, f".out.{kind}20261201"),
        "copied": _user_folder(folder, f".out.{kind}backup01"),
    }
    shutil.copy2(copied_from / MARKER, stages["copied"] / MARKER)  # a real marker, in a folder it was not made in
    shutil.rmtree(copied_from)
    (folder / f".out.{kind}s1mlink0").symlink_to(stages["victim"])
    fd = os.open(stages["live"], os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return stages, fd


def _check(folder: Path, stages: dict[str, Path], kind: str, caplog) -> None:
    assert not stages["stale"].exists()
    for name in ("live", "other", "victim", "dated", "copied"):
        assert (stages[name] / "thesis.txt").read_text() == "my only copy", name
    assert (folder / f".out.{kind}s1mlink0").is_symlink()
    left = sorted(p.name for p in folder.iterdir())
    assert left == sorted(
        [f".out.{kind}{s}" for s in ("runn1ng0", "s1mlink0", "20261201", "backup01")]
        + [f".out.y.{kind}k1ll3d_9", "victim", "out", "m"]
    )
    messages = [r.getMessage() for r in caplog.records]
    assert any(str(stages["stale"]) in m and "killed" in m for m in messages)
    for name in ("dated", "copied"):  # named, in one line each
        assert any(f"left {stages[name]} alone" in m and "\n" not in m for m in messages), name


@pytest.fixture
def plain(tiny_model, tmp_path) -> Path:
    path = tmp_path / "m"
    tiny_model.save(str(path))
    return path


def test_the_next_convert_removes_what_a_killed_convert_left_and_nothing_else(tiny_model, plain, tmp_path, caplog):
    from st_magnitude.model._save import save_model

    stages, fd = _plant(tmp_path, "save-", "convert")
    try:
        with caplog.at_level(logging.WARNING):
            save_model(tiny_model, tmp_path / "out")
    finally:
        os.close(fd)
    assert (tmp_path / "out" / "modules.json").is_file() and not (tmp_path / "out" / MARKER).exists()
    _check(tmp_path, stages, "save-", caplog)


def test_the_next_strip_removes_what_a_killed_strip_left_and_nothing_else(plain, tmp_path, caplog):
    import warnings

    from st_magnitude.model.convert import strip_normalize

    stages, fd = _plant(tmp_path, "strip-", "strip")
    try:
        with caplog.at_level(logging.WARNING), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            strip_normalize(plain, output_path=tmp_path / "out")
    finally:
        os.close(fd)
    assert (tmp_path / "out" / "modules.json").is_file() and not (tmp_path / "out" / MARKER).exists()
    _check(tmp_path, stages, "strip-", caplog)


def test_convert_keeps_a_users_folder_named_like_its_stage(saved_tiny, tmp_path, monkeypatch, caplog):
    """The reproduction: ``mkdir .backup.save-20261201`` with the user's only copy, then ``convert -o backup``."""
    from st_magnitude.cli import main

    monkeypatch.chdir(tmp_path)
    mine = _user_folder(tmp_path, ".backup.save-20261201")
    with pytest.warns(UserWarning), caplog.at_level(logging.WARNING):
        assert main(["convert", str(saved_tiny), "qnorm", "-o", "backup"]) == 0
    assert (mine / "thesis.txt").read_text() == "my only copy"
    assert (tmp_path / "backup" / "modules.json").is_file() and not (tmp_path / "backup" / MARKER).exists()
    (line,) = [r.getMessage() for r in caplog.records if str(mine) in r.getMessage()]
    assert f"left {mine} alone" in line and "no .st-magnitude-stage file" in line


def test_a_stage_of_another_run_kind_or_with_a_hard_linked_marker_is_left(tmp_path, caplog):
    """A convert's stage is not an export's to remove; a marker that is a hard link is no marker this package
    wrote (its record could be any file's)."""
    target = tmp_path / "out"
    convert_stage = killed_stage(target, infix="", suffix=".partial", run="convert")  # export's name, convert's mark
    linked = killed_stage(target, infix="", suffix=".partial", run="export")
    os.link(linked / MARKER, tmp_path / "elsewhere")
    with caplog.at_level(logging.WARNING):
        remove_stale_stages(target, suffix=".partial", run="export")
    assert convert_stage.is_dir() and linked.is_dir()
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "does not name a export" in messages and "not the plain file" in messages


def test_a_stage_on_another_device_than_its_parent_is_left(tmp_path, monkeypatch, caplog):
    """A file system mounted at a stale stage's name (simulated: its parent reports another ``st_dev``)."""
    import st_magnitude._trust.owned as owned

    target = tmp_path / "out"
    stage = killed_stage(target, suffix=".partial", run="export")
    real_stat = os.stat

    def other_parent_device(path, *args, **kwargs):
        st = real_stat(path, *args, **kwargs)
        if not kwargs.get("dir_fd") and Path(path) == tmp_path:
            return os.stat_result((st.st_mode, st.st_ino, st.st_dev + 1, *tuple(st)[3:]))
        return st

    monkeypatch.setattr(owned.os, "stat", other_parent_device)
    with caplog.at_level(logging.WARNING):
        remove_stale_stages(target, suffix=".partial", run="export")
    assert (stage / "model.safetensors").is_file()
    assert any("mount point" in r.getMessage() and str(stage) in r.getMessage() for r in caplog.records)


def test_a_stage_this_run_made_is_marked_and_unmarked_by_the_writer(tmp_path):
    with held_stage(tmp_path / "out", infix="save-", run="convert") as stage:
        assert (stage / MARKER).is_file()
        with pytest.raises(BlockingIOError):  # held: another run leaves it alone
            fd = os.open(stage, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            finally:
                os.close(fd)
    remove_stale_stages(tmp_path / "out", infix="save-", run="convert")  # released, marked: a killed run's
    assert not stage.exists()


def test_a_stage_that_becomes_the_output_gets_the_mode_mkdir_gives(tmp_path):
    """``mkdtemp`` makes a stage 0700; the folder it becomes (a converted model, an export) is readable as a plain
    ``mkdir`` under the umask would make it."""
    import os

    from st_magnitude._trust.stages import held_stage, unmark

    mask = os.umask(0o022)
    try:
        with held_stage(tmp_path / "out", infix="save-", run="convert") as stage:
            assert stage.stat().st_mode & 0o777 == 0o700
            unmark(stage)
            assert stage.stat().st_mode & 0o777 == 0o755
            (tmp_path / "plain").mkdir()
            assert stage.stat().st_mode & 0o777 == (tmp_path / "plain").stat().st_mode & 0o777
    finally:
        os.umask(mask)
