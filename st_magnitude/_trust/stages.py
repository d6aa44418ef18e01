"""Staging folders beside an output, and what a killed run leaves of them.

``export``, ``convert`` and ``strip`` write a new folder into a staging folder beside the output
(``.OUT.XXXXXXXX.partial``, ``.OUT.save-XXXXXXXX``, ``.OUT.strip-XXXXXXXX``) and rename it into place at the end. A
run holds a ``flock`` on its staging folder while it writes, so the kernel lets go of it however the run ends
(SIGKILL included): a staging folder of the same output that nobody holds was left by a killed run, and the next run
writing that output removes it (:func:`held_stage`), naming it in a warning. A folder another run still holds, the
stages of other outputs and a symlink named like a stage are left alone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = ["held_stage", "remove_stale_stages"]

#: the random part ``tempfile.mkdtemp`` puts into a name
_RANDOM = "[A-Za-z0-9_]{8}"


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


def remove_stale_stages(target: Path, *, infix: str = "", suffix: str = "", run: str) -> None:
    """Remove the staging folders ``.<target name>.<infix>XXXXXXXX<suffix>`` beside ``target`` (real folders, not
    symlinks) that no running ``run`` holds; name them where the platform cannot tell."""
    pattern = re.compile(rf"\.{re.escape(target.name)}\.{re.escape(infix)}{_RANDOM}{re.escape(suffix)}")
    with os.scandir(target.parent) as entries:
        stages = [Path(e.path) for e in entries if pattern.fullmatch(e.name) and e.is_dir(follow_symlinks=False)]
    for stage in stages:
        try:
            fd = _hold(stage)
        except OSError:  # held by a running one (or gone meanwhile)
            continue
        if fd is None:  # pragma: no cover
            logger.warning("%s: %s may be left by a killed %s; remove it when none runs", run, stage, run)
            continue
        try:
            shutil.rmtree(stage)
            logger.warning("%s: removed %s, left by a killed %s", run, stage, run)
        except OSError as exc:  # removed meanwhile, or not removable: named, never fatal
            logger.warning("%s: could not remove %s, left by a killed %s (%s)", run, stage, run, exc)
        finally:
            os.close(fd)


@contextlib.contextmanager
def held_stage(target: Path, *, infix: str = "", suffix: str = "", run: str) -> Iterator[Path]:
    """A new staging folder ``.<target name>.<infix>XXXXXXXX<suffix>`` beside ``target`` (the stale ones of killed
    runs removed first), held with a ``flock`` until the block ends. Renaming it into place or removing it is the
    caller's."""
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_stages(target, infix=infix, suffix=suffix, run=run)
    stage = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.{infix}", suffix=suffix))
    try:
        fd = _hold(stage)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    try:
        yield stage
    finally:
        if fd is not None:
            os.close(fd)
