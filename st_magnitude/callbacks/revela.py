"""Trainer callbacks of :class:`~st_magnitude.losses.revela.RevelaLoss` (paper 004): LM gradient clipping and the
relevance diagnostics. The LM's checkpoints are :class:`~st_magnitude.callbacks.LossStateCallback`'s job;
:func:`revela_callbacks` returns all of them.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import torch
from torch import nn
from transformers import TrainerCallback

from st_magnitude.callbacks._log import add_to_log
from st_magnitude.callbacks.loss_state import LossStateCallback

logger = logging.getLogger(__name__)

__all__ = [
    "DIAGNOSTIC_KEYS",
    "RevelaDiagnosticsCallback",
    "RevelaLMCheckpointCallback",
    "RevelaLMGradClipCallback",
    "revela_callbacks",
]


class RevelaLMGradClipCallback(TrainerCallback):
    """Clips the gradient of ``loss.lm`` to the Trainer's ``max_grad_norm`` before every optimizer step.

    The Trainer clips only the retriever (``model.parameters()``); the LM lives in the loss, so its parameters are
    in the optimizer (``SentenceTransformerTrainer`` builds it from ``loss.named_parameters()``) but were never
    clipped. This callback clips them in ``on_pre_optimizer_step``:

    * gradient accumulation: that event fires once per optimizer step, after the last micro-batch, so the
      accumulated gradient is clipped, once;
    * fp16 (GradScaler): the Trainer's own clipping unscales the gradients of *every* parameter of the optimizer
      (the LM's included) before that event; if the optimizer still holds scaled gradients (``max_grad_norm``
      clipping bypassed), the callback unscales them first. Scaler steps with inf/NaN are skipped by the scaler;
    * bf16 / fp32: no scaling, nothing to undo.

    The LM's norm is its own: the retriever is clipped to ``max_grad_norm`` by the Trainer and the LM to
    ``max_grad_norm`` here (the official code clips one joint norm over both LoRA sets; a callback cannot, because
    the Trainer has clipped the retriever before any callback runs). ``max_grad_norm`` ≤ 0 disables both.
    The pre-clip LM norm of the last step is in ``last_grad_norm`` and is logged as ``lm_grad_norm``.
    """

    def __init__(self, loss: nn.Module) -> None:
        self.loss = loss
        self.last_grad_norm: float | None = None
        self._norms: list[float] = []

    def on_pre_optimizer_step(self, args, state, control, optimizer=None, **kwargs):
        max_norm = getattr(args, "max_grad_norm", None)
        if max_norm is None or max_norm <= 0:
            return control
        params = [p for p in self.loss.lm.parameters() if p.requires_grad and p.grad is not None]
        if not params:
            return control
        _unscale_if_needed(optimizer)
        norm = torch.nn.utils.clip_grad_norm_(params, float(max_norm))
        self.last_grad_norm = float(norm)
        self._norms.append(self.last_grad_norm)
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self._norms and logs is not None and "loss" in logs:
            value = round(sum(self._norms) / len(self._norms), 4)
            add_to_log(state, logs, {"lm_grad_norm": value})
            self._norms.clear()
        return control


def _unscale_if_needed(optimizer) -> None:
    """Unscale the gradients of an accelerate-wrapped optimizer whose GradScaler has not unscaled them this step."""
    scaler = getattr(optimizer, "scaler", None)
    if scaler is None or not scaler.is_enabled():
        return
    from accelerate.optimizer import AcceleratedOptimizer
    from torch.amp.grad_scaler import OptState

    inner = optimizer
    while isinstance(inner, AcceleratedOptimizer):
        inner = inner.optimizer

    stage = scaler._per_optimizer_states[id(inner)]["stage"]
    if stage is OptState.READY:
        scaler.unscale_(inner)


DIAGNOSTIC_KEYS = ("ce_revela", "ce_shuffled_sim", "ce_plain_lm", "ce_gap_shuffled", "ce_gap_plain", "sim_row_max")


class RevelaDiagnosticsCallback(TrainerCallback):
    """Every ``every`` optimizer steps, measure on that step's first batch whether relevance matters to the LM.

    Sets ``loss.diagnose_next_batch`` at the start of steps 0, every, 2·every, …; the loss then runs
    :meth:`~st_magnitude.losses.revela.RevelaLoss.relevance_diagnostics` (three LM forwards without gradient) on the
    batch it was given and appends the result, with ``step``, to ``loss.diagnostics``. At each Trainer log the mean of
    the records since the previous log is added to the log entry (``trainer.state.log_history``) as ``revela_<key>``
    for ``ce_gap_shuffled`` (CE(real Sim) − CE(shuffled Sim)), ``ce_gap_plain`` (CE(Revela) − CE(plain LM)),
    ``ce_revela``, ``ce_shuffled_sim``, ``ce_plain_lm`` and ``sim_row_max``. Reporting integrations that log before
    this callback runs (they are added to the Trainer first) do not see these keys; ``loss.diagnostics`` and the log
    history always have them.

    Args:
        loss: the :class:`~st_magnitude.losses.revela.RevelaLoss` being trained.
        every: diagnose every this many optimizer steps (≥ 1).
        seed: seeds the random permutations of the shuffled-Sim control.
        shuffles: permutations averaged in ``ce_shuffled_sim`` (each costs one LM forward without gradient).
    """

    def __init__(self, loss: nn.Module, every: int = 50, seed: int = 0, shuffles: int = 1) -> None:
        if int(every) < 1:
            raise ValueError(f"every must be >= 1; got {every}")
        if int(shuffles) < 1:
            raise ValueError(f"shuffles must be >= 1; got {shuffles}")
        loss.diagnostics_shuffles = int(shuffles)
        self.loss = loss
        self.every = int(every)
        self.loss.diagnostics_generator = torch.Generator().manual_seed(int(seed))
        self._logged = 0

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step % self.every == 0:
            self.loss.diagnose_next_batch = True
            self.loss.diagnostics_step = state.global_step
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        new = self.loss.diagnostics[self._logged :]
        if not new or logs is None or "loss" not in logs:
            return control
        self._logged = len(self.loss.diagnostics)
        values = {f"revela_{key}": round(sum(r[key] for r in new) / len(new), 4) for key in DIAGNOSTIC_KEYS}
        add_to_log(state, logs, values)
        return control


def revela_callbacks(
    loss: nn.Module, diagnostics_every: int = 0, seed: int = 0, shuffles: int = 1
) -> list[TrainerCallback]:
    """The callbacks a Trainer run of :class:`~st_magnitude.losses.revela.RevelaLoss` needs: LM checkpointing
    (:class:`~st_magnitude.callbacks.LossStateCallback`), LM gradient clipping and (``diagnostics_every`` > 0) the
    relevance diagnostics every ``diagnostics_every`` optimizer steps, averaging ``shuffles`` permutations for the
    shuffled-Sim CE."""
    callbacks: list[TrainerCallback] = [LossStateCallback(loss), RevelaLMGradClipCallback(loss)]
    if diagnostics_every:
        callbacks.append(RevelaDiagnosticsCallback(loss, every=diagnostics_every, seed=seed, shuffles=shuffles))
    return callbacks


class RevelaLMCheckpointCallback(LossStateCallback):
    """Deprecated: use :class:`~st_magnitude.callbacks.LossStateCallback` (the same behaviour for every loss).

    Kept for one release; it also restores checkpoints written by its old version (``checkpoint-N/revela_lm/``).
    """

    def __init__(self, loss: nn.Module) -> None:
        warnings.warn(
            "RevelaLMCheckpointCallback is deprecated: use `from st_magnitude.callbacks import LossStateCallback` "
            "(or revela_callbacks(loss)); it saves the LM as checkpoint-N/loss_state.safetensors",
            DeprecationWarning,
            stacklevel=2,
        )
        super().__init__(loss, on_missing="raise")

    def _restore_legacy(self, checkpoint: Path) -> bool:
        from st_magnitude.losses.revela_lm import LM_CHECKPOINT_DIR, load_lm_weights

        folder = checkpoint / LM_CHECKPOINT_DIR
        try:
            load_lm_weights(self.loss.lm, folder)
        except FileNotFoundError:
            return False
        logger.info("restored the Revela LM from %s (written by the old RevelaLMCheckpointCallback)", folder)
        return True
