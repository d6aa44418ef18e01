"""Logging a learnable softmax scale (inverse temperature) during training.

:class:`ScaleLoggingCallback` adds the current scale (and its temperature 1/scale) of a loss built with
``scale="learnable"`` / ``temperature="learnable"`` to every Trainer log entry, so ``trainer.state.log_history``
holds its trajectory. A loss cannot report it through its returned dict: the Trainer sums every value of that dict
into the training loss.
"""

from __future__ import annotations

import logging
from typing import Any

from torch import nn
from transformers import TrainerCallback

from st_magnitude.callbacks._log import add_to_log
from st_magnitude.losses._temperature import LearnableScale

logger = logging.getLogger(__name__)

__all__ = ["ScaleLoggingCallback", "current_scale"]


def current_scale(loss: nn.Module) -> dict[str, float]:
    """``{"learned_scale": s, "learned_temperature": 1/s}`` of the learnable scale held by ``loss`` (a cached loss:
    by its wrapped loss); empty when the loss holds none. With several (a wrapper around several losses) the keys
    carry the module path, e.g. ``learned_scale[loss.scale]``."""
    found = [(name, m) for name, m in loss.named_modules() if isinstance(m, LearnableScale)]
    out: dict[str, float] = {}
    for name, module in found:
        suffix = f"[{name}]" if len(found) > 1 else ""
        out[f"learned_scale{suffix}"] = module.value
        out[f"learned_temperature{suffix}"] = 1.0 / module.value
    return out


class ScaleLoggingCallback(TrainerCallback):
    """Add ``learned_scale`` / ``learned_temperature`` of a learnable scale to every Trainer log entry.

    Args:
        loss: the loss passed to the trainer (built with ``scale="learnable"`` or ``temperature="learnable"``).

    Raises:
        ValueError: ``loss`` holds no learnable scale.

    Example::

        loss = PartialNormInfoNCELoss(model, "cosine", scale="learnable")
        trainer = SentenceTransformerTrainer(..., loss=loss, callbacks=[ScaleLoggingCallback(loss)])
        trainer.train()
        [(h["step"], h["learned_scale"]) for h in trainer.state.log_history if "learned_scale" in h]
    """

    def __init__(self, loss: nn.Module) -> None:
        if not current_scale(loss):
            raise ValueError(
                f"{type(loss).__name__} holds no learnable scale: build it with scale='learnable' "
                "(PartialNormInfoNCELoss) or temperature='learnable' (MWLoss, L2DirLoss)"
            )
        self.loss = loss

    def on_log(self, args, state, control, logs: dict[str, Any] | None = None, model=None, **kwargs):
        add_to_log(state, logs, current_scale(self.loss))
        return control
