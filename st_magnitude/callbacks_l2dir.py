"""Keep the L2Dir NAP head across checkpoints, and log the L2Dir statistics.

sentence-transformers optimizes parameters that live in a loss but saves and restores only the model
— without help, a resumed run silently restarts the NAP head from random weights. Add
:class:`L2DirCallback` to the trainer::

    loss = L2DirLoss(model)
    trainer = SentenceTransformerTrainer(model=model, ..., loss=loss, callbacks=[L2DirCallback(loss)])
    trainer.train()                                   # each checkpoint-N/ gets a nap_head/ folder
    trainer.train(resume_from_checkpoint=True)        # restores checkpoint-N/nap_head before the first step

The head is saved as a standard module folder (``config.json`` + ``model.safetensors``); :func:`save_nap_head` /
:func:`load_nap_head` export and re-load it on request. Retrieval never needs it (paper 002 §5.4).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from st_magnitude.modules.nap_head import NAPHead

logger = logging.getLogger(__name__)

__all__ = ["NAP_HEAD_DIRNAME", "L2DirCallback", "save_nap_head", "load_nap_head"]

#: Sub-folder of a checkpoint that holds the NAP head.
NAP_HEAD_DIRNAME = "nap_head"


def _head_of(loss_or_head: Any) -> NAPHead:
    head = loss_or_head if isinstance(loss_or_head, NAPHead) else getattr(loss_or_head, "nap_head", None)
    if not isinstance(head, NAPHead):
        raise ValueError(
            f"expected an L2DirLoss/CachedL2DirLoss (or InfoTNLoss with a head) or a NAPHead, got "
            f"{type(loss_or_head).__name__} without a NAP head"
        )
    return head


def save_nap_head(loss_or_head: Any, path: str | os.PathLike) -> Path:
    """Write the NAP head of ``loss_or_head`` to the folder ``path`` (config + safetensors) and return it."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    _head_of(loss_or_head).save(str(path))
    return path


def load_nap_head(loss_or_head: Any, path: str | os.PathLike) -> NAPHead:
    """Copy the weights saved in ``path`` into the existing head of ``loss_or_head`` (in place) and return it.

    In place, so an optimizer that already holds the head's parameters keeps optimizing the same tensors. The saved
    head must have the same shape (its config is checked first).
    """
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"no saved NAP head in {path} (expected config.json and model.safetensors)")
    head = _head_of(loss_or_head)
    saved = NAPHead.load(str(path))
    if saved.get_config_dict() != head.get_config_dict():
        raise ValueError(
            f"the NAP head saved in {path} has config {saved.get_config_dict()}, but the loss's head has "
            f"{head.get_config_dict()}; build the loss with the same head shape"
        )
    with torch.no_grad():
        for name, tensor in saved.state_dict().items():
            head.state_dict()[name].copy_(tensor)
    return head


class L2DirCallback(TrainerCallback):
    """Save the NAP head with every checkpoint, restore it on resume, and log the L2Dir batch statistics.

    Args:
        loss: the :class:`~st_magnitude.losses.l2dir.L2DirLoss` / ``CachedL2DirLoss`` (or ``InfoTNLoss`` with a
            head) passed to the trainer.
        log_stats: add the loss's averaged statistics to each training log (``l2dir_length_ratio_mean`` — the
            positive-pair PO length ratio ‖PO_q‖/‖PO_t‖ of paper §5.1 — its std, PO norms, mean positive sim_TN,
            and the unweighted InfoNCE / InfoTN values).
    """

    def __init__(self, loss: Any, log_stats: bool = True) -> None:
        _head_of(loss)
        self.loss = loss
        self.log_stats = log_stats
        loss.callback_attached = True

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs):
        if state.global_step <= 0:
            return
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}" / NAP_HEAD_DIRNAME
        if folder.is_dir():
            load_nap_head(self.loss, folder)
            logger.info("Restored the NAP head from %s", folder)
        else:
            logger.warning(
                "Resuming at step %d but %s does not exist: the NAP head restarts from its current weights. If you "
                "resumed from a checkpoint outside output_dir, call st_magnitude.callbacks_l2dir.load_nap_head(loss, "
                "'<checkpoint>/%s') before trainer.train().",
                state.global_step,
                folder,
                NAP_HEAD_DIRNAME,
            )

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs):
        if not state.is_world_process_zero:
            return
        checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if checkpoint.is_dir():
            save_nap_head(self.loss, checkpoint / NAP_HEAD_DIRNAME)

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, logs=None, **kwargs):
        if not self.log_stats or logs is None or "loss" not in logs or not hasattr(self.loss, "pop_stats"):
            return
        stats = {f"l2dir_{k}": round(v, 4) for k, v in self.loss.pop_stats().items()}
        logs.update(stats)
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1].update(stats)
