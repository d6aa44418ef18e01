"""Logging the learnable similarity's γq / γd during training.

:class:`GammaLoggingCallback` adds the learnable γq / γd to the Trainer logs. A loss cannot report γ through its
returned dict, because the Trainer sums every value of that dict into the training loss.
"""

from __future__ import annotations

import logging
from typing import Any

from torch import nn
from transformers import TrainerCallback

from st_magnitude.callbacks._log import add_to_log
from st_magnitude.model.info import carried_similarity
from st_magnitude.similarity import LearnableSimilarity, Similarity

logger = logging.getLogger(__name__)

__all__ = ["GammaLoggingCallback", "current_gammas"]


def _unwrap(model: nn.Module) -> nn.Module:
    while hasattr(model, "module") and isinstance(model.module, nn.Module):
        model = model.module
    return getattr(model, "_orig_mod", model)


def current_gammas(model: nn.Module | None = None, loss: nn.Module | None = None) -> dict[str, float]:
    """``{"gamma_query": γq, "gamma_document": γd}`` of a learnable similarity: the one the model carries (after
    ``apply_similarity(model, "learnable")``), else one held by ``loss.similarity_fct``; empty when there is none."""
    sim: Similarity | None = None
    if model is not None:
        try:
            sim = carried_similarity(_unwrap(model))
        except TypeError:  # not a SentenceTransformer-like module list
            sim = None
    if not isinstance(sim, LearnableSimilarity) and loss is not None:
        candidate = getattr(loss, "similarity_fct", None)
        sim = candidate if isinstance(candidate, LearnableSimilarity) else None
    if not isinstance(sim, LearnableSimilarity):
        return {}
    return {"gamma_query": sim.gamma_query, "gamma_document": sim.gamma_document}


class GammaLoggingCallback(TrainerCallback):
    """Add ``gamma_query`` / ``gamma_document`` of the learnable similarity to every Trainer log entry.

    Args:
        loss: optional loss to read γ from when the model does not carry a learnable similarity (a plain model
            trained with ``similarity="learnable"``, whose γ̂ lives in the loss).

    Example::

        trainer = SentenceTransformerTrainer(..., callbacks=[GammaLoggingCallback()])
        trainer.train()
        [(h["step"], h.get("gamma_query")) for h in trainer.state.log_history]
    """

    def __init__(self, loss: nn.Module | None = None) -> None:
        self.loss = loss
        self._warned = False

    def on_log(self, args, state, control, logs: dict[str, Any] | None = None, model=None, **kwargs):
        gammas = current_gammas(model, self.loss)
        if not gammas:
            if not self._warned:
                logger.warning("GammaLoggingCallback: no learnable similarity found on the model or the loss.")
                self._warned = True
            return control
        add_to_log(state, logs, gammas)
        return control
