"""Where results go: an output file or folder is checked before any work, so a long run never fails at its end.

The write side of the trust boundary (:mod:`.write` writes atomically); the CLI and the lab call these on every
output flag before they train, evaluate or read anything large.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["check_output_dir", "check_output_file"]


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


def check_output_file(path: str | os.PathLike, what: str = "output file") -> None:
    """Raise before any work when ``path`` cannot be written as a file (a folder, under a file, not writable)."""
    p = Path(path)
    if p.is_dir():
        raise IsADirectoryError(f"{what} {str(path)!r} is a folder; give a file name (e.g. {Path(path, 'out')}).")
    anchor = _nearest_existing(p.parent)
    if not anchor.is_dir():
        raise NotADirectoryError(f"{what} {str(path)!r} cannot be created: {anchor} is a file, not a folder.")
    if p.exists() and not os.access(p, os.W_OK):
        raise PermissionError(f"{what} {str(path)!r} is not writable.")
    _probe_dir(anchor, what, str(path))


def check_output_dir(path: str | os.PathLike, what: str = "output folder", *, must_be_empty: bool = False) -> None:
    """Raise before any work when ``path`` cannot be used as an output folder."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise NotADirectoryError(f"{what} {str(path)!r} is a file, not a folder.")
    if must_be_empty and p.is_dir() and any(p.iterdir()):
        raise FileExistsError(f"{what} {str(path)!r} exists and is not empty.")
    anchor = _nearest_existing(p)
    if not anchor.is_dir():
        raise NotADirectoryError(f"{what} {str(path)!r} cannot be created: {anchor} is a file, not a folder.")
    _probe_dir(anchor, what, str(path))
