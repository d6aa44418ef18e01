"""Where results go: an output file or folder is checked before any work, so a long run never fails at its end.

The write side of the trust boundary (:mod:`.write` writes atomically); the CLI and the lab call these on every
output flag before they train, evaluate or read anything large.

No output may be, or lie inside, anything the command reads (:func:`check_outside_inputs`: the model, ``--data``,
``--train-data``, ``--eval-data``, calibration and text files), however the path is spelled (``..``, symlinks).

:func:`removed_on_failure` is the one cleanup rule of every command that writes, under the rule of :mod:`.owned`: a
run removes only what it made itself. It makes the missing folders of an output itself, one ``mkdir`` each, before
the command runs, and records the identity of each it made; a failed or interrupted run takes back those folders
(and an output this run renamed into place from its own staging folder) and nothing else. A folder that existed
before the run, a folder another run made first (two runs to one output: the loser's failure leaves the winner's
output), or one replaced since, is never removed; ``-o keep/new/..`` (which names ``keep`` once ``keep/new`` exists)
can never make it remove ``keep`` (the folder ``keep/new`` such a path walks through, absent at the start, is removed
only while empty: ``rmdir`` cannot take a file with it). A run that succeeds without using a folder it made (still
empty) takes it back.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from st_magnitude._trust.owned import hold, made_here, make_dir, remove_tree

logger = logging.getLogger(__name__)

__all__ = [
    "check_output_dir",
    "check_output_file",
    "check_outside_inputs",
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
    check_outside_inputs({"model": model}, output, what, may_be=("model",) if may_be_the_model else ())


def _resolved(path: str | os.PathLike, what: str = "path") -> Path:
    """``Path(path).resolve()``, a symlink loop on the way one ``ValueError`` naming it (not a traceback)."""
    try:
        return Path(path).resolve()
    except (RuntimeError, OSError) as exc:  # RuntimeError: Python before 3.13 on a loop
        raise ValueError(f"{what} {os.fspath(path)!r} cannot be resolved: {exc}; remove the symlink loop") from None


def _paths(value: object) -> list[str | os.PathLike]:
    if value is None:
        return []
    if isinstance(value, (str, os.PathLike)):
        return [value]
    if isinstance(value, Iterable):
        return [v for v in value if isinstance(v, (str, os.PathLike))]
    return []


def check_outside_inputs(
    inputs: Mapping[str, object],
    output: str | os.PathLike | None,
    what: str,
    *,
    may_be: Iterable[str] = (),
) -> None:
    """Raise ``ValueError`` (one line naming both) when ``output`` is, or lies inside, a file or folder the command
    reads: ``inputs`` maps a name (``"model"``, ``"--data"``) to a path or a list of paths; one that does not exist
    (a hub id, a dataset name) has nothing to protect. Both sides are resolved first (``..``, symlinks).
    ``may_be``: names of ``inputs`` the output may *be* (not lie inside)."""
    if output is None:
        return
    real_output = _resolved(output, what)
    may_be = set(may_be)
    for name, value in inputs.items():
        for source in _paths(value):
            if not os.path.exists(source):
                continue
            real = _resolved(source, name)
            kind = "the model folder" if name == "model" else f"{name}"
            advice = (
                "no command writes inside the model folder it reads: choose a path outside it"
                if name == "model"
                else "no command writes over or inside what it reads: choose a path outside it"
            )
            if real_output == real:
                if name in may_be:
                    continue
                noun = kind if name == "model" else f"the input {kind}"
                raise ValueError(f"{what} {os.fspath(output)!r} is {noun} {os.fspath(source)!r} itself; {advice}")
            if real in real_output.parents:
                noun = kind if name == "model" else f"the input {kind}"
                raise ValueError(
                    f"{what} {os.fspath(output)!r} lies inside {noun} {os.fspath(source)!r} "
                    f"(at {real_output.relative_to(real)}); {advice}"
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
        real = _resolved(prefix)
        if not os.path.lexists(real):
            made[real] = None
    return sorted(made, key=lambda p: len(p.parts), reverse=True)


def _make_folders(folders: list[Path], held: list[int]) -> list[Path]:
    """Make ``folders`` (shallowest first) with one ``mkdir`` each, recording each as this run's and holding a
    descriptor of it in ``held``; stop at the first that cannot be made (there already: not this run's; or not
    makeable: the command says why). Those made."""
    made = []
    for folder in folders:
        try:
            make_dir(folder)
        except FileExistsError:
            continue  # another run made it meanwhile: not this run's
        except OSError:
            break  # under a file, not writable: the command's own checks name it
        made.append(folder)
        with contextlib.suppress(OSError):
            held.append(hold(folder))
    return made


@contextmanager
def _closed(fds: list[int]) -> Iterator[None]:
    try:
        yield
    finally:
        for fd in fds:
            os.close(fd)


@contextmanager
def removed_on_failure(path: str | os.PathLike | None, *, keep_contents: bool = False) -> Iterator[None]:
    """Make the missing folders of the output folder ``path`` now, recorded as this run's (:mod:`.owned`); when the
    block fails (an error or Ctrl-C), remove them again -- ``path`` with what the run wrote in it -- if each is still
    the folder this run made (or one it renamed into place from its own staging folder). A folder that existed
    before, was made by another run, or was replaced since is named in a warning and left alone. When the block
    succeeds, a folder made here that the command left empty is removed (it never used it).

    ``keep_contents``: remove only the created folders that are empty (a resumable run keeps what it wrote, e.g. a
    partial result to continue). For an output *file*, pass its folder with ``keep_contents=True``.
    """
    if path is None:
        yield
        return
    output = _resolved(path)
    absent = folders_made_for(path)  # deepest first
    # a folder a ``..`` walks through inside the output (``new`` of ``OUT/new/..``) is not made here: the command
    # would find its output not empty
    walked = [f for f in absent if output in f.parents]
    held: list[int] = []  # open until the cleanup is done: no other folder can get their inode numbers
    made = _make_folders([f for f in absent if f not in walked][::-1], held)[::-1]  # made shallowest first
    with _closed(held):
        yield from _cleaned(made, walked, output, keep_contents)


def _cleaned(made: list[Path], walked: list[Path], output: Path, keep_contents: bool) -> Iterator[None]:
    """The body of :func:`removed_on_failure` around its ``yield``."""
    try:
        yield
    except BaseException:
        for folder in made:  # deepest first
            if folder == output and not keep_contents:
                if made_here(folder):
                    remove_tree(folder)
                elif os.path.lexists(folder):
                    logger.warning("left %s alone: this run did not make it (another run did)", folder)
            elif made_here(folder) and folder.is_dir() and not any(folder.iterdir()):
                remove_tree(folder, keep_contents=True)
        for folder in walked:  # absent at the start and still empty: rmdir, which cannot take a file with it
            with contextlib.suppress(OSError):
                if not os.path.islink(folder):
                    folder.rmdir()
        raise
    for folder in made:
        if made_here(folder) and folder.is_dir() and not any(folder.iterdir()):
            remove_tree(folder, keep_contents=True)
