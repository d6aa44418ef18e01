"""The one rule for removals (:mod:`st_magnitude._trust.owned`): a run removes only a folder it made itself,
identified by the ``(st_dev, st_ino)`` recorded when it made it; a symlink, a folder it did not make, one replaced
since, or a mount point is named in one warning and left; inside what it removes it follows no symlink and enters
no other device."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

import st_magnitude._trust.owned as owned
from st_magnitude._trust.owned import hold, made_here, make_dir, make_temp_dir, remove_tree


def _precious(folder: Path) -> Path:
    folder.mkdir()
    (folder / "thesis.txt").write_text("my only copy")
    return folder


def _left(caplog, path: Path, why: str) -> None:
    (line,) = [r.getMessage() for r in caplog.records if f"left {path} alone" in r.getMessage()]
    assert why in line and "\n" not in line


def test_a_folder_this_run_made_is_removed_with_what_it_holds(tmp_path):
    folder = tmp_path / "out"
    make_dir(folder)
    (folder / "sub").mkdir()
    (folder / "sub" / "x.bin").write_bytes(b"x")
    assert made_here(folder) and remove_tree(folder)
    assert not folder.exists() and not made_here(folder)


def test_a_folder_this_run_did_not_make_is_left(tmp_path, caplog):
    mine = _precious(tmp_path / "mine")
    with caplog.at_level(logging.WARNING):
        assert not remove_tree(mine)
    assert (mine / "thesis.txt").read_text() == "my only copy"
    _left(caplog, mine, "this run did not make it")


def test_a_made_folder_replaced_by_another_is_left(tmp_path, caplog):
    folder = tmp_path / "out"
    make_dir(folder)
    fd = hold(folder)  # as its maker does while the identity matters: the inode number cannot be given again
    try:
        os.rmdir(folder)
        _precious(folder)  # someone else's folder under the same name
        with caplog.at_level(logging.WARNING):
            assert not remove_tree(folder)
    finally:
        os.close(fd)
    assert (folder / "thesis.txt").exists()
    _left(caplog, folder, "this run did not make it")


def test_a_symlink_to_a_made_folder_is_not_followed(tmp_path, caplog):
    folder = make_temp_dir(tmp_path, prefix="stage.")
    link = tmp_path / "link"
    link.symlink_to(folder)
    with caplog.at_level(logging.WARNING):
        assert not remove_tree(link)
    assert folder.is_dir() and link.is_symlink()
    _left(caplog, link, "symbolic link")


def test_links_inside_are_removed_not_followed(tmp_path):
    mine = _precious(tmp_path / "mine")
    folder = tmp_path / "out"
    make_dir(folder)
    (folder / "link").symlink_to(mine)
    os.link(mine / "thesis.txt", folder / "hard.txt")
    assert remove_tree(folder)
    assert (mine / "thesis.txt").read_text() == "my only copy" and os.stat(mine / "thesis.txt").st_nlink == 1


def test_a_made_folder_on_another_device_than_its_parent_is_left(tmp_path, monkeypatch, caplog):
    """A file system mounted on the folder (simulated: its parent reports another ``st_dev``)."""
    folder = tmp_path / "out"
    make_dir(folder)
    (folder / "f").write_text("on the mounted file system")
    real = os.stat

    def other_device(path, *args, **kwargs):
        st = real(path, *args, **kwargs)
        if "dir_fd" not in kwargs and Path(path) == tmp_path:
            return os.stat_result((st.st_mode, st.st_ino, st.st_dev + 1, *tuple(st)[3:]))
        return st

    monkeypatch.setattr(owned.os, "stat", other_device)
    with caplog.at_level(logging.WARNING):
        assert not remove_tree(folder)
    assert (folder / "f").exists()
    _left(caplog, folder, "mount point")


def test_a_mount_point_inside_is_not_entered(tmp_path, monkeypatch, caplog):
    """Another device mounted inside what is removed (simulated: its entry reports another ``st_dev``)."""
    folder = tmp_path / "out"
    make_dir(folder)
    (folder / "mnt").mkdir()
    (folder / "mnt" / "f").write_text("on the mounted file system")
    (folder / "mine.bin").write_bytes(b"x")
    real = os.stat

    def mounted(path, *args, **kwargs):
        st = real(path, *args, **kwargs)
        if kwargs.get("dir_fd") is not None and path == "mnt":
            return os.stat_result((st.st_mode, st.st_ino, st.st_dev + 1, *tuple(st)[3:]))
        return st

    monkeypatch.setattr(owned.os, "stat", mounted)
    with caplog.at_level(logging.WARNING):
        assert not remove_tree(folder)
    assert (folder / "mnt" / "f").exists() and not (folder / "mine.bin").exists()
    assert any("on another device" in r.getMessage() for r in caplog.records)


def test_keep_contents_removes_a_made_folder_only_when_empty(tmp_path):
    folder = tmp_path / "out"
    make_dir(folder)
    (folder / "part.json").write_text("{}")
    assert not remove_tree(folder, keep_contents=True) and (folder / "part.json").exists()
    (folder / "part.json").unlink()
    assert remove_tree(folder, keep_contents=True) and not folder.exists()


def test_make_dir_refuses_what_is_there(tmp_path):
    mine = _precious(tmp_path / "mine")
    with pytest.raises(FileExistsError):
        make_dir(mine)
    assert not made_here(mine)


def test_a_bind_mount_inside_is_not_entered(tmp_path, monkeypatch, caplog):
    """A bind mount of a folder of the same file system has its parent's ``st_dev``: the mount table tells it."""
    mine = _precious(tmp_path / "mine")
    folder = tmp_path / "out"
    make_dir(folder)
    (folder / "bind").mkdir()
    os.link(mine / "thesis.txt", folder / "bind" / "thesis.txt")  # what the bind mount shows: the user's files
    real = owned._mount_points()
    monkeypatch.setattr(owned, "_mount_points", lambda: real | {str(folder.resolve() / "bind")})
    with caplog.at_level(logging.WARNING):
        assert not remove_tree(folder)
    assert (folder / "bind" / "thesis.txt").exists()
    assert any("on another device" in r.getMessage() for r in caplog.records)
