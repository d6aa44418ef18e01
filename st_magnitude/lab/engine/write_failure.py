"""Turn a failed write during training (a full disk while the Trainer saves a checkpoint, or while the trained model
is saved) into one clear ``OSError``, after removing what was half-written.

The Trainer writes a checkpoint file by file (weights, optimizer through ``torch.save``, ``trainer_state.json``
last); a full disk surfaces as ``OSError(ENOSPC)`` or as torch's ``RuntimeError: [enforce fail at
inline_container.cc...]`` and leaves a partial ``checkpoint-N``. The caller passes its tidying function (which
removes incomplete checkpoints and returns the whole ones), so a re-run resumes from the last whole checkpoint.
"""

from __future__ import annotations

import errno
import shutil
from collections.abc import Callable
from pathlib import Path

from st_magnitude.lab.engine import dist as _dist

__all__ = ["checkpoint_write_failure", "is_write_error", "model_save_failure"]

#: Errors a write can end with because of the disk (torch reports a failed ``torch.save`` as a RuntimeError).
_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EFBIG}
_TORCH_WRITE_MARKERS = ("inline_container", "PytorchStreamWriter", "file write failed", "No space left")


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _oserror(code: int, message: str) -> OSError:
    err = OSError(message)  # the message alone (``OSError(code, msg)`` would prefix "[Errno N]")
    err.errno = code
    return err


def is_write_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a write to disk that failed (full disk, quota, I/O error)."""
    if isinstance(exc, OSError) and exc.errno in _WRITE_ERRNOS:
        return True
    return isinstance(exc, RuntimeError) and any(m in str(exc) for m in _TORCH_WRITE_MARKERS)


def checkpoint_write_failure(exc: BaseException, ckpt_dir: Path, tidy: Callable[[Path], list[Path]]) -> OSError | None:
    """An ``OSError`` explaining a checkpoint that could not be written, after ``tidy`` removed it; ``None`` when
    ``exc`` did not come from writing a checkpoint (no incomplete one was left and it is no write error)."""
    if not _dist.is_main():  # rank 0 writes the checkpoints and tidies them
        return None
    before = {p.name for p in ckpt_dir.glob("checkpoint-*")} if ckpt_dir.is_dir() else set()
    whole = tidy(ckpt_dir)
    removed = sorted(before - {p.name for p in whole})
    if not removed and not is_write_error(exc):
        return None
    code = exc.errno if isinstance(exc, OSError) and exc.errno else errno.EIO
    resume = (
        f"it resumes from {whole[-1].name}" if whole else "no whole checkpoint is left, so it starts this run over"
    )
    return _oserror(
        code,
        f"could not write the training checkpoint {', '.join(removed) or 'files'} under {ckpt_dir} "
        f"({_first_line(exc)}); the incomplete checkpoint was removed. Free disk space and run the same command "
        f"again: {resume}.",
    )


def model_save_failure(exc: BaseException, model_dir: Path) -> OSError | None:
    """An ``OSError`` explaining a trained model that could not be saved, after removing the partial folder; ``None``
    when ``exc`` is no write error."""
    if not is_write_error(exc) and type(exc).__name__ != "SafetensorError":
        return None
    shutil.rmtree(model_dir, ignore_errors=True)
    code = exc.errno if isinstance(exc, OSError) and exc.errno else errno.EIO
    return _oserror(
        code,
        f"could not save the trained model to {model_dir} ({_first_line(exc)}); the partial folder was removed and "
        "the run's checkpoints were kept. Free disk space and run the same command again: it resumes from the last "
        "checkpoint.",
    )
