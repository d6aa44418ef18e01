"""Where results go: an output file or folder is checked before any work, so a long run never fails at its end.

The write side of the trust boundary (:mod:`.write` writes atomically); the CLI and the lab call these on every
output flag before they train, evaluate or read anything large.

:func:`removed_on_failure` is the one cleanup rule of every command that writes: a failed or interrupted run takes
back the folders it created for its outputs, and nothing else. What it created is decided from the *resolved*
paths before the run starts, so ``-o keep/new/..`` (which names ``keep`` once ``keep/new`` exists) can never make
it remove ``keep``: a folder that existed before the run is never removed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = [
    "check_output_dir",
    "check_output_file",
    "check_outside_model",
    "folders_made_for",
    "output_path",
    "removed_on_failure",
]


def output_path(path: str | os.PathLike) -> Path:
    """The absolute path an output ``path`` names, as every check and writer takes it: the folder holding it resolved
    (``..`` and symlinks: ``OUT/sub/..`` is ``OUT``), its last component kept as written unless it is ``.`` or
    ``..`` (so a symlink *at* the output stays visible to the writer's own checks)."""
    p = Path(path).absolute()
    if p.name in ("", ".", ".."):  # Path("x/.") is already "x"; "x/.." and "/" resolve whole
        return p.resolve()
    return p.parent.resolve() / p.name


def _probe_dir(folder: Path, what: str, path: str) -> None:
    """Create and remove a file in ``folder``: the only test that also holds for root on a read-only mount."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise PermissionError(f"{what} {path!r} is not writable ({folder}: {exc.strerror or exc}).") from None


def _nearest_existing(path: Path) -> Path:
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _refuse_empty(path: str | os.PathLike, what: str) -> None:
    """An empty string is no path (``Path("")`` is the current folder, which ``-o ''`` would silently write into)."""
    if isinstance(path, str) and not path.strip():
        raise ValueError(f"{what} is empty: name a folder ('.' for the current one)")


def check_output_file(path: str | os.PathLike, what: str = "output file") -> None:
    """Raise before any work when ``path`` cannot be written as a file (a folder, under a file, not writable)."""
    _refuse_empty(path, what)
    p = output_path(path)
    if p.is_dir():
        raise IsADirectoryError(f"{what} {str(path)!r} is a folder; give a file name (e.g. {Path(path, 'out')}).")
    anchor = _nearest_existing(p.parent)
    if not anchor.is_dir():
        raise NotADirectoryError(f"{what} {str(path)!r} cannot be created: {anchor} is a file, not a folder.")
    if p.exists() and not os.access(p, os.W_OK):
        raise PermissionError(f"{what} {str(path)!r} is not writable.")
    _probe_dir(anchor, what, str(path))


def check_output_dir(path: str | os.PathLike, what: str = "output folder", *, must_be_empty: bool = False) -> None:
    """Raise before any work when ``path`` cannot be used as an output folder (as :func:`output_path` names it)."""
    _refuse_empty(path, what)
    p = output_path(path)
    if p.exists() and not p.is_dir():
        raise NotADirectoryError(f"{what} {str(path)!r} is a file, not a folder.")
    if must_be_empty and p.is_dir() and any(p.iterdir()):
        raise FileExistsError(f"{what} {str(path)!r} exists and is not empty.")
    anchor = _nearest_existing(p)
    if not anchor.is_dir():
        raise NotADirectoryError(f"{what} {str(path)!r} cannot be created: {anchor} is a file, not a folder.")
    _probe_dir(anchor, what, str(path))


def check_outside_model(
    model: str | os.PathLike | None,
    output: str | os.PathLike | None,
    what: str,
    *,
    may_be_the_model: bool = False,
) -> None:
    """Raise ``ValueError`` when ``output`` (a file or folder) is the local model folder ``model`` or lies inside it,
    however the path is spelled (``..``, symlinks): no command writes into the model it reads. A ``model`` that is
    no local folder (a hub id) has nothing to protect. ``may_be_the_model``: the model folder itself is allowed
    (``calibrate`` saves its map there by design), a path inside it is not."""
    if model is None or output is None or not Path(model).is_dir():
        return
    real_model = Path(model).resolve()
    real_output = Path(output).resolve()
    advice = "no command writes inside the model folder it reads: choose a path outside it"
    if real_output == real_model:
        if may_be_the_model:
            return
        raise ValueError(f"{what} {os.fspath(output)!r} is the model folder {os.fspath(model)!r} itself; {advice}")
    if real_model in real_output.parents:
        raise ValueError(
            f"{what} {os.fspath(output)!r} lies inside the model folder {os.fspath(model)!r} "
            f"(at {real_output.relative_to(real_model)}); {advice}"
        )


def folders_made_for(path: str | os.PathLike) -> list[Path]:
    """The folders that making ``path`` (as ``os.makedirs`` walks it, component by component) would create, resolved
    and deepest first: every prefix of the path that does not exist now, less those that resolve to a folder that
    does (``keep/new/..`` is ``keep``)."""
    parts = Path(path).absolute().parts
    made: dict[Path, None] = {}
    for i in range(1, len(parts) + 1):
        prefix = Path(*parts[:i])
        if prefix.exists():
            continue
        real = prefix.resolve()
        if not os.path.lexists(real):
            made[real] = None
    return sorted(made, key=lambda p: len(p.parts), reverse=True)


@contextmanager
def removed_on_failure(path: str | os.PathLike | None, *, keep_contents: bool = False) -> Iterator[None]:
    """When the block fails (an error or Ctrl-C), remove the output folder ``path`` and the parents created for it,
    if this run created them; a folder that existed before is never touched.

    ``keep_contents``: remove only the created folders that are empty (a resumable run keeps what it wrote, e.g. a
    partial result to continue). For an output *file*, pass its folder with ``keep_contents=True``.
    """
    if path is None:
        yield
        return
    output = Path(path).resolve()
    made = folders_made_for(path)
    try:
        yield
    except BaseException:
        for folder in made:  # deepest first
            if folder == output and not keep_contents:
                shutil.rmtree(folder, ignore_errors=True)
            elif folder.is_dir() and not folder.is_symlink() and not any(folder.iterdir()):
                folder.rmdir()
        raise
