"""Argument types and up-front checks shared by the ``st-magnitude`` sub-commands (no heavy imports).

Every command validates its arguments and its outputs before any work (loading a model, reading data): numbers
through the ``argparse`` types below (a bad value is a one-line usage error, exit 2), output paths through
:func:`check_output_file` / :func:`check_output_dir`, which *probe* writability by creating and removing a file
(``os.access`` says yes to root on a read-only file system), and :func:`removed_on_failure` takes back an output
folder a failed run created.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = [
    "check_device",
    "check_output_dir",
    "check_output_file",
    "non_negative_int",
    "positive_float",
    "positive_int",
    "removed_on_failure",
]


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def positive_int(text: str) -> int:
    """``argparse`` type: an integer >= 1."""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    """``argparse`` type: an integer >= 0."""
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """``argparse`` type: a finite float > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return value


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


@contextmanager
def removed_on_failure(path: str | os.PathLike | None) -> Iterator[None]:
    """Remove ``path`` (and the parents created for it) when the block fails and the folder did not exist before."""
    if path is None:
        yield
        return
    p = Path(path).absolute()
    created = []
    q = p
    while not q.exists() and q != q.parent:
        created.append(q)
        q = q.parent
    try:
        yield
    except BaseException:
        for folder in created:  # deepest first
            if folder == p:
                shutil.rmtree(folder, ignore_errors=True)
            elif folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        raise


def check_device(device: str | None) -> str | None:
    """Validate a torch device string (``cpu``, ``cuda``, ``cuda:1``, ``mps``) and that it exists here."""
    if device is None:
        return None
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        raise ValueError(f"unknown device {device!r}; expected cpu, cuda, cuda:N or mps.") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r} requested but CUDA is not available here; use --device cpu.")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: only {torch.cuda.device_count()} CUDA device(s) here.")
    elif dev.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ValueError(f"device {device!r} requested but MPS is not available here; use --device cpu.")
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"unsupported device {device!r}; expected cpu, cuda, cuda:N or mps.")
    return device
