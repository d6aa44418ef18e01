"""Keep the trainable state that lives in a loss across checkpoints: one callback for every loss.

sentence-transformers optimises parameters that live in a loss (the L2Dir NAP head, Revela's LM, the γ̂ of a
learnable similarity on a plain model) but saves and restores only the model: without help, a resumed run silently
restarts them. :class:`LossStateCallback` writes the loss's state next to each Trainer checkpoint
(``checkpoint-N/loss_state.safetensors``) and copies it back, in place, when ``train(resume_from_checkpoint=...)``
resumes::

    loss = L2DirLoss(model)  # or RevelaLoss(...), CachedMWLoss(model, "learnable"), ...
    trainer = SentenceTransformerTrainer(model=model, ..., loss=loss, callbacks=[LossStateCallback(loss)])
    trainer.train()                                   # each checkpoint-N/ gets loss_state.safetensors
    trainer.train(resume_from_checkpoint=True)        # restores it before the first step

What the state is: a loss may define ``loss_state_dict()`` / ``load_loss_state_dict(state)``; otherwise its
trainable parameters that are not the model's (:func:`~st_magnitude.losses._loss_state.loss_state_dict`). A cached
loss saves its wrapped plain loss's state under the plain loss's names, so the two read each other's checkpoints.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from torch import nn
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from st_magnitude._trust.errors import InputFileError
from st_magnitude._trust.tensors import load_tensors
from st_magnitude.callbacks._log import add_to_log
from st_magnitude.losses._loss_state import load_loss_state_dict, loss_state_dict

logger = logging.getLogger(__name__)

__all__ = ["LossStateCallback", "LossStatsCallback", "save_loss_state", "load_loss_state", "LOSS_STATE_FILENAME"]
# loss_state_dict / load_loss_state_dict (the protocol) are re-exported by st_magnitude.callbacks

#: File, inside a checkpoint folder, that holds the loss's state.
LOSS_STATE_FILENAME = "loss_state.safetensors"

ON_MISSING = ("raise", "warn")


def save_loss_state(loss: nn.Module, folder: str | os.PathLike) -> Path | None:
    """Write the state of ``loss`` to ``folder/loss_state.safetensors`` and return the file; ``None`` (nothing
    written) when the loss holds no trainable state."""
    from safetensors.torch import save_file

    state = loss_state_dict(loss)
    if not state:
        return None
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOSS_STATE_FILENAME
    save_file(state, str(path), metadata={"loss": type(loss).__name__, "names": json.dumps(sorted(state))})
    return path


def load_loss_state(loss: nn.Module, folder: str | os.PathLike) -> None:
    """Copy the state saved by :func:`save_loss_state` in ``folder`` into ``loss``, in place.

    The file is read through the trust boundary (:func:`~st_magnitude._trust.tensors.load_tensors`): nothing is
    copied unless every tensor is finite and the names and shapes fit the loss.

    Raises:
        FileNotFoundError: ``folder`` holds no saved loss state.
        InputFileError: (a ``ValueError``) the file is not a valid safetensors file, a tensor holds NaN or ±inf, or
            the saved names or shapes do not fit the loss (built with other settings); the message names the file.
    """
    path = Path(folder) / LOSS_STATE_FILENAME
    if not path.is_file():
        raise FileNotFoundError(f"no saved loss state at {path}")
    state = load_tensors(path)
    try:
        load_loss_state_dict(loss, state)
    except InputFileError:
        raise
    except ValueError as exc:  # the names or shapes in the file do not fit the loss
        raise InputFileError(path, str(exc)) from None


class LossStateCallback(TrainerCallback):
    """Save the trainable state of ``loss`` with every checkpoint and restore it when training resumes.

    Args:
        loss: the loss passed to the trainer.
        on_missing: what a resumed run does when ``<output_dir>/checkpoint-<step>`` has no saved state for a loss
            that holds some: ``"raise"`` (default; training a fresh head or LM against a trained model is silent
            data loss) or ``"warn"`` (e.g. after resuming from a checkpoint outside ``output_dir`` and calling
            :func:`load_loss_state` yourself).

    Example::

        from st_magnitude.callbacks import LossStateCallback

        trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=data, loss=loss,
                                             callbacks=[LossStateCallback(loss)])
    """

    def __init__(self, loss: nn.Module, on_missing: str = "raise") -> None:
        if on_missing not in ON_MISSING:
            raise ValueError(f"on_missing must be one of {list(ON_MISSING)}, got {on_missing!r}")
        self.loss = loss
        self.on_missing = on_missing
        if hasattr(loss, "callback_attached"):  # a loss that warns when nothing checkpoints its state
            loss.callback_attached = True

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any):
        if not state.is_world_process_zero:
            return control
        checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if checkpoint.is_dir():
            path = save_loss_state(self.loss, checkpoint)
            if path is not None:
                logger.info("saved the state of %s to %s", type(self.loss).__name__, path)
        return control

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any):
        if state.global_step <= 0 or not loss_state_dict(self.loss):
            return control
        checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if (checkpoint / LOSS_STATE_FILENAME).is_file():
            load_loss_state(self.loss, checkpoint)
            logger.info("restored the state of %s from %s", type(self.loss).__name__, checkpoint)
        else:
            message = (
                f"resuming at step {state.global_step}, but {checkpoint / LOSS_STATE_FILENAME} does not exist: the "
                f"trainable state of {type(self.loss).__name__} (not part of the model) would restart from its "
                "current values. If you resumed from a checkpoint outside output_dir, call "
                "st_magnitude.callbacks.load_loss_state(loss, '<checkpoint>') before trainer.train() and pass "
                "LossStateCallback(loss, on_missing='warn')."
            )
            if self.on_missing == "raise":
                raise FileNotFoundError(message)
            logger.warning(message)
        return control


class LossStatsCallback(TrainerCallback):
    """Add the statistics a loss averages over the logging interval (``loss.pop_stats()``) to each training log.

    Args:
        loss: a loss with ``pop_stats() -> dict[str, float]`` (L2Dir: the positive-pair PO length ratio
            ‖PO_q‖/‖PO_t‖ of paper 002 §5.1, its std, the PO norms, the mean positive sim_TN and the unweighted
            InfoNCE / InfoTN values; MW: the in-batch AUC and the mean loss per pair, which it computes only once
            this callback is attached).
        prefix: prepended to each key; default ``loss.stats_prefix`` (L2Dir: ``"l2dir_"``).
    """

    def __init__(self, loss: nn.Module, prefix: str | None = None) -> None:
        if not callable(getattr(loss, "pop_stats", None)):
            raise ValueError(f"{type(loss).__name__} keeps no statistics (it has no pop_stats())")
        if hasattr(loss, "record_stats"):  # a loss whose statistics cost a pass computes them once they are read
            loss.record_stats = True
        self.loss = loss
        self.prefix = getattr(loss, "stats_prefix", "") if prefix is None else prefix

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, logs=None, **kwargs):
        if logs is None or "loss" not in logs:
            return control
        add_to_log(state, logs, {f"{self.prefix}{k}": round(v, 4) for k, v in self.loss.pop_stats().items()})
        return control
