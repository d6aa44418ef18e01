"""Deprecated module (one release): L2Dir's NAP head is checkpointed by the generic
:class:`st_magnitude.callbacks.LossStateCallback` and its statistics logged by
:class:`st_magnitude.callbacks.LossStatsCallback`; :func:`save_nap_head` / :func:`load_nap_head` moved to
:mod:`st_magnitude.losses.l2dir`.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

from transformers import TrainerControl, TrainerState, TrainingArguments

from st_magnitude._lazy import moved_exports
from st_magnitude.callbacks.loss_state import LossStateCallback, LossStatsCallback

logger = logging.getLogger(__name__)

__all__ = ["L2DirCallback"]

__getattr__, __dir__ = moved_exports(
    __name__,
    {name: "st_magnitude.losses.l2dir" for name in ("NAP_HEAD_DIRNAME", "load_nap_head", "save_nap_head")},
)


class L2DirCallback(LossStateCallback):
    """Deprecated: use ``callbacks=[LossStateCallback(loss), LossStatsCallback(loss)]`` from
    :mod:`st_magnitude.callbacks` (this class is both, with ``on_missing="warn"`` as before).

    Kept for one release; it also restores checkpoints written by its old version (``checkpoint-N/nap_head/``).
    """

    def __init__(self, loss: Any, log_stats: bool = True) -> None:
        warnings.warn(
            "L2DirCallback is deprecated: use `from st_magnitude.callbacks import LossStateCallback, "
            "LossStatsCallback` and callbacks=[LossStateCallback(loss), LossStatsCallback(loss)]",
            DeprecationWarning,
            stacklevel=2,
        )
        from st_magnitude.losses.l2dir import _head_of

        _head_of(loss)
        super().__init__(loss, on_missing="warn")
        self.log_stats = log_stats
        self._stats = LossStatsCallback(loss) if log_stats and hasattr(loss, "pop_stats") else None

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, logs=None, **kwargs):
        if self._stats is not None:
            self._stats.on_log(args, state, control, logs=logs, **kwargs)
        return control

    def _restore_legacy(self, checkpoint: Path) -> bool:
        from st_magnitude.losses.l2dir import NAP_HEAD_DIRNAME, load_nap_head

        folder = checkpoint / NAP_HEAD_DIRNAME
        if not folder.is_dir():
            return False
        load_nap_head(self.loss, folder)
        logger.info("restored the NAP head from %s (written by the old L2DirCallback)", folder)
        return True
