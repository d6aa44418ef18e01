"""What this run made: the one rule for every removal, rename over and write into an existing path.

A run may remove, rename over or write into **only what it made itself**, identified when it made it: right after
this process's own ``mkdir`` / ``mkdtemp`` / ``open(O_CREAT | O_EXCL)`` / ``rename`` the ``(st_dev, st_ino)`` of
what it made is recorded here (:func:`record`, :func:`make_dir`, :func:`make_temp_dir`), and compared before any
removal (:func:`remove_tree`). While such an identity matters, the maker keeps a descriptor of it open (a stage's
``flock``, a lock file's descriptor, :func:`hold`), so the file system cannot give its inode number to another folder
made after it was removed. Anything else -- named like a stage, left by a dead run, made by a concurrent run,
reached through a symlink -- is named in one logged warning and left alone.

:func:`remove_tree` never follows a symlink, refuses a folder on another device than its parent or listed in the
mount table (a mount point, a bind mount of the same file system), and inside the tree it removes never descends
into another device or mount point (named and kept). It works on descriptors (``openat``), so a folder swapped for a
symlink while it runs is not followed. Standard library only.
"""

from __future__ import annotations

import logging
import os
import re
import stat
import tempfile
import threading
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = ["Identity", "hold", "identity_of", "made_here", "make_dir", "make_temp_dir", "record", "remove_tree"]

#: ``(st_dev, st_ino)``: what names one file or folder while it exists, whatever path leads to it.
Identity = tuple[int, int]

_made: set[Identity] = set()
_guard = threading.Lock()

_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def identity_of(path: str | os.PathLike) -> Identity | None:
    """The identity of ``path`` itself (a symlink is not followed), or None when nothing is there."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return (st.st_dev, st.st_ino)


def record(path: str | os.PathLike) -> Identity:
    """Record ``path`` as made by this process; call it right after this process's own mkdir / O_EXCL open /
    rename made it. Returns its identity."""
    st = os.lstat(path)
    ident = (st.st_dev, st.st_ino)
    with _guard:
        _made.add(ident)
    return ident


def _forget(ident: Identity) -> None:
    with _guard:
        _made.discard(ident)


def made_here(path: str | os.PathLike) -> bool:
    """Whether ``path`` (not followed if a symlink) is a file or folder this process recorded as its own."""
    ident = identity_of(path)
    with _guard:
        return ident is not None and ident in _made


def hold(path: str | os.PathLike) -> int:
    """A descriptor of the folder ``path`` (not followed if a symlink) to keep open while its identity must stay
    unique: an inode number freed by a removal can be given to the next folder made, but not while it is open."""
    return os.open(path, _DIR_FLAGS)


def make_dir(path: str | os.PathLike) -> Identity:
    """``os.mkdir(path)`` (``FileExistsError`` when anything is there: it is then not this run's) and record it."""
    os.mkdir(path)
    return record(path)


def make_temp_dir(parent: str | os.PathLike, prefix: str, suffix: str = "") -> Path:
    """A new folder ``parent/<prefix>XXXXXXXX<suffix>`` (``tempfile.mkdtemp``), recorded as this run's."""
    folder = Path(tempfile.mkdtemp(dir=parent, prefix=prefix, suffix=suffix))
    record(folder)
    return folder


def _refusal(path: Path, st: os.stat_result, expected: Identity | None) -> str | None:
    """Why ``path`` (lstat ``st``) must be left alone, or None."""
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a folder"
    ident = (st.st_dev, st.st_ino)
    if expected is not None:
        if ident != expected:
            return "it is no longer the folder this run made (replaced by another)"
    else:
        with _guard:
            ours = ident in _made
        if not ours:
            return "this run did not make it (another run or the user did)"
    try:
        parent_dev = os.stat(path.parent).st_dev
    except OSError as exc:
        return f"its parent cannot be read ({exc.strerror or exc})"
    if st.st_dev != parent_dev or os.path.ismount(path) or _real(path) in _mount_points():
        return "it is a mount point (another device than its parent)"
    return None


def _real(path: Path) -> str:
    """``path`` with its parent resolved (its last component is never followed)."""
    return os.path.join(os.path.realpath(path.parent), path.name)


def _mount_points() -> frozenset[str]:
    """Every mount point of this process (``/proc/self/mountinfo``; empty where there is none): a bind mount of a
    folder of the same file system has its parent's ``st_dev``, so only this list tells it."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return frozenset()
    points = set()
    for line in lines:
        fields = line.split(" ")
        if len(fields) > 4:  # the fifth field, octal escapes for space, tab, newline and backslash
            points.add(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]))
    return frozenset(points)


def remove_tree(path: str | os.PathLike, *, expected: Identity | None = None, keep_contents: bool = False) -> bool:
    """Remove the folder ``path`` with what it holds, only if this run made it: its identity is one :func:`record`
    noted (or ``expected``, the identity the caller saw it made). Otherwise, or for a symlink, a file or a mount
    point, name it in a warning and leave it. ``keep_contents``: remove it only when empty.

    Inside, nothing on another device is entered (named and kept, with the folders holding it). Returns whether
    ``path`` is gone; errors while removing are named in a warning, never raised."""
    path = Path(path).absolute()
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return True
    except OSError as exc:
        logger.warning("left %s alone: it cannot be read (%s)", path, exc.strerror or exc)
        return False
    why = _refusal(path, st, expected)
    if why is not None:
        logger.warning("left %s alone: %s", path, why)
        return False
    ident = (st.st_dev, st.st_ino)
    try:
        parent_fd = os.open(path.parent, _DIR_FLAGS & ~getattr(os, "O_NOFOLLOW", 0))
        try:
            fd = os.open(path.name, _DIR_FLAGS, dir_fd=parent_fd)
            try:
                fst = os.fstat(fd)
                if (fst.st_dev, fst.st_ino) != ident:
                    logger.warning("left %s alone: it was replaced while being removed", path)
                    return False
                if keep_contents:
                    kept = [] if not os.listdir(fd) else [path]
                else:
                    kept = _clear(fd, st.st_dev, Path(_real(path)), _mount_points())
            finally:
                os.close(fd)
            if kept:
                if not keep_contents:
                    logger.warning("removed what %s held but %s (on another device)", path, ", ".join(map(str, kept)))
                return False
            os.rmdir(path.name, dir_fd=parent_fd)
        finally:
            os.close(parent_fd)
    except OSError as exc:
        logger.warning("could not remove %s (%s)", path, exc.strerror or exc)
        return False
    _forget(ident)
    return True


def _clear(fd: int, dev: int, where: Path, mounts: frozenset[str]) -> list[Path]:
    """Remove what the open folder ``fd`` (at ``where``, resolved) holds, entering no other device or mount point
    (``mounts``) and following no symlink; the paths kept (mount points and what holds them)."""
    kept: list[Path] = []
    for name in os.listdir(fd):
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(name, dir_fd=fd)
            continue
        if st.st_dev != dev or str(where / name) in mounts:
            kept.append(where / name)
            continue
        sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
        try:
            fst = os.fstat(sub)
            swapped = (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino)  # replaced between the stat and the open
            inner = [where / name] if swapped else _clear(sub, dev, where / name, mounts)
        finally:
            os.close(sub)
        if inner:
            kept.extend(inner)
        else:
            os.rmdir(name, dir_fd=fd)
    return kept
