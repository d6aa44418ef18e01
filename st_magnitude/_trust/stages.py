"""Staging folders beside an output, and what a killed run leaves of them.

``export``, ``convert`` and ``strip`` write a new folder into a staging folder beside the output
(``.OUT.XXXXXXXX.partial``, ``.OUT.save-XXXXXXXX``, ``.OUT.strip-XXXXXXXX``) and rename it into place at the end.
The rule of :mod:`.owned` holds here: a run removes only what it made itself. So each stage carries a marker file
this package writes inside it the moment it is made (:data:`MARKER`: the package, the run, and the stage's own
``(st_dev, st_ino)``, so a marker copied or moved into another folder does not count), and the caller takes the
marker out (:func:`unmark`) just before the stage becomes the output. A run holds a ``flock`` on its staging folder
while it writes, so the kernel lets go of it however the run ends (SIGKILL included).

The next run writing that output removes a staging folder of it (:func:`held_stage`, naming it in a warning) only
when nobody holds it, it carries a marker of that run kind naming that very folder, it is a real folder (not a
symlink) on its parent's device and not a mount point. Anything else named like a stage -- a user's
``.OUT.save-20261201`` holding their files, a symlink, a folder with a copied marker, a mount point, a stage still
held -- is named in one warning and left alone.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

from st_magnitude._trust.errors import InputFileError
from st_magnitude._trust.json_files import parse_json_bytes
from st_magnitude._trust.owned import identity_of, make_temp_dir, remove_tree

logger = logging.getLogger(__name__)

__all__ = ["MARKER", "held_stage", "remove_stale_stages", "unmark"]

#: the random part ``tempfile.mkdtemp`` puts into a name
_RANDOM = "[A-Za-z0-9_]{8}"
#: the file inside a staging folder that says this package made it, for which run, and which folder it was made in
MARKER = ".st-magnitude-stage"
_PACKAGE = "st-magnitude"
_MAX_MARKER = 4096


def _hold(folder: Path) -> int | None:
    """A descriptor of ``folder`` holding its ``flock`` (None where the platform has no ``fcntl``); ``OSError`` when
    another process holds it."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: stale stages are named, not removed
        return None
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _mark(stage: Path, run: str) -> None:
    """Write the marker into the new ``stage`` (created exclusively, never through a link)."""
    st = os.lstat(stage)
    record = {"package": _PACKAGE, "run": run, "pid": os.getpid(), "dev": st.st_dev, "ino": st.st_ino}
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(stage / MARKER, flags, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(record, fh)


def _folder_mode() -> int:
    """The mode ``mkdir`` gives a new folder under this process's umask (read without changing it where Linux says)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return 0o777 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o777 & ~mask


def unmark(stage: Path) -> None:
    """Take the marker out of ``stage`` before it becomes the output (its rename, or the digests of its files), and
    give it the mode a plain ``mkdir`` would (``mkdtemp`` makes it 0700: a model others could not read)."""
    (stage / MARKER).unlink(missing_ok=True)
    os.chmod(stage, _folder_mode())


def _not_a_stage(stage: Path, run: str) -> str | None:
    """Why ``stage`` is not a staging folder of a ``run`` this package made, or None when it is."""
    marker = stage / MARKER
    try:
        fd = os.open(marker, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return f"it holds no {MARKER} file, so this package did not make it"
    except OSError as exc:
        return f"its {MARKER} cannot be read ({exc.strerror or exc})"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_size > _MAX_MARKER:
            return f"its {MARKER} is not the plain file this package writes"
        raw = os.read(fd, _MAX_MARKER + 1)
    finally:
        os.close(fd)
    try:
        info = parse_json_bytes(raw, marker)
    except InputFileError:
        return f"its {MARKER} is not the record this package writes"
    if not isinstance(info, dict) or info.get("package") != _PACKAGE or info.get("run") != run:
        return f"its {MARKER} does not name a {run} of this package"
    if identity_of(stage) != (info.get("dev"), info.get("ino")):
        return f"its {MARKER} was made in another folder (copied or moved here)"
    return None


def remove_stale_stages(target: Path, *, infix: str = "", suffix: str = "", run: str) -> None:
    """Remove the staging folders ``.<target name>.<infix>XXXXXXXX<suffix>`` beside ``target`` that a killed ``run``
    left (module docstring); name every other folder of such a name and leave it."""
    pattern = re.compile(rf"\.{re.escape(target.name)}\.{re.escape(infix)}{_RANDOM}{re.escape(suffix)}")
    with os.scandir(target.parent) as entries:
        stages = [Path(e.path) for e in entries if pattern.fullmatch(e.name)]
    for stage in stages:
        if stage.is_symlink() or not stage.is_dir():
            logger.warning("%s: left %s alone: named like a staging folder, but not a folder of its own", run, stage)
            continue
        try:
            fd = _hold(stage)
        except OSError:  # held by a running one (or gone meanwhile)
            continue
        if fd is None:  # pragma: no cover
            logger.warning("%s: %s may be left by a killed %s; remove it when none runs", run, stage, run)
            continue
        try:
            why = _not_a_stage(stage, run)
            if why is not None:
                logger.warning("%s: left %s alone: named like a staging folder, but %s", run, stage, why)
                continue
            if remove_tree(stage, expected=identity_of(stage)):
                logger.warning("%s: removed %s, left by a killed %s", run, stage, run)
        finally:
            os.close(fd)


@contextlib.contextmanager
def held_stage(target: Path, *, infix: str = "", suffix: str = "", run: str) -> Iterator[Path]:
    """A new staging folder ``.<target name>.<infix>XXXXXXXX<suffix>`` beside ``target`` (the stale ones of killed
    runs removed first), marked as this package's and recorded as this run's (:mod:`.owned`), held with a ``flock``
    until the block ends. Calling :func:`unmark` and renaming it into place, or removing it, is the caller's."""
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_stages(target, infix=infix, suffix=suffix, run=run)
    stage = make_temp_dir(target.parent, prefix=f".{target.name}.{infix}", suffix=suffix)
    try:
        fd = _hold(stage)
        _mark(stage, run)
    except BaseException:
        remove_tree(stage)
        raise
    try:
        yield stage
    finally:
        if fd is not None:
            os.close(fd)
