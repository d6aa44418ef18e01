"""Saving a converted model so that a failed save (a full disk) leaves no partial output and ends in one line.

:func:`save_model` writes the model into a staging folder beside the output and renames it into place, so the
output folder holds a complete model or nothing; the staging folder a killed convert left (``.OUT.save-XXXXXXXX``)
is removed by the next save to the same output (:mod:`st_magnitude._trust.stages`). A full disk reaches Python in
several forms (``OSError`` ENOSPC from a JSON or tokenizer file, safetensors' ``SafetensorError`` "No space left on
device", torch's ``RuntimeError`` from its zip writer); each becomes one ``OSError`` naming the output, which the CLI
prints as one line.
"""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path
from typing import Any

from st_magnitude._trust.owned import remove_tree
from st_magnitude._trust.stages import held_stage, unmark

logger = logging.getLogger(__name__)

__all__ = ["save_model"]

_DISK_FULL = ("no space left", "storagefull", "disk quota", "os error 28", "errno 28", "unexpected pos")


def _disk_full(exc: BaseException) -> bool:
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return any(mark in str(exc).lower() for mark in _DISK_FULL)


def save_model(model: Any, output: str | os.PathLike) -> Path:
    """``model.save(output)`` through a staging folder beside ``output`` (which must be new or empty)."""
    from st_magnitude._trust.outputs import output_path

    target = output_path(output)  # OUT/sub/.. is OUT: the rename below must name the folder itself
    with held_stage(target, infix="save-", run="convert") as stage:  # a killed convert's stage: removed here
        try:
            model.save(str(stage))
            unmark(stage)  # the stage becomes the output: the marker that it is a stage goes
            if target.is_dir():
                target.rmdir()  # new or empty: checked by the caller, and rmdir refuses anything else
            os.rename(stage, target)
        except BaseException as exc:
            remove_tree(stage)  # this run's own stage (or, renamed already, its own output), nothing else
            if isinstance(exc, Exception) and _disk_full(exc):
                raise OSError(
                    errno.ENOSPC,
                    f"cannot save the model to {output}: no space left on device "
                    f"({' '.join(str(exc).split())[:200]}); nothing was written there. Free space or choose another "
                    "--output",
                ) from None
            raise
    logger.info("saved the model to %s", target)
    return target
