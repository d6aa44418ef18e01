"""Early stopping on a dev split for the claims whose paper trains to convergence (paper 001 §5: early stopping on
the validation set): evaluate every ``every`` steps, keep the best weights in memory, stop after ``patience``
evaluations without a gain, and restore the best weights at the end. The dev history feeds the convergence gate
(:func:`st_magnitude.lab.replication.gates.converged`)."""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable

logger = logging.getLogger(__name__)

__all__ = ["EarlyStopping"]


class EarlyStopping:
    """``callback`` is a ``TrainerCallback`` for :func:`~st_magnitude.lab.replication.common.train`; ``history`` the
    dev evaluations ``[{"step": s, "dev": score}, ...]`` (step 0 = before training), ``best_step`` the restored one."""

    def __init__(self, model, score: Callable[[], float], *, every: int, patience: int) -> None:
        from transformers import TrainerCallback

        if every < 1 or patience < 1:
            raise ValueError(f"every and patience must be >= 1, got {every} and {patience}")
        self.model, self.score, self.every, self.patience = model, score, every, patience
        self.history: list[dict[str, float]] = []
        self.best, self.best_step, self.best_state, self.bad = -float("inf"), 0, None, 0
        self.measure(0)
        outer = self

        class _Callback(TrainerCallback):
            def on_step_end(self, args, state, control, **kw):
                if state.global_step % outer.every == 0 and outer.measure(state.global_step):
                    control.should_training_stop = True

            def on_train_end(self, args, state, control, **kw):
                outer.restore()

        self.callback = _Callback()

    def measure(self, step: int) -> bool:
        """Evaluate on dev; True when training should stop."""
        value = float(self.score())
        self.history.append({"step": step, "dev": value})
        if value > self.best:
            self.best, self.best_step, self.bad = value, step, 0
            self.best_state = copy.deepcopy({k: v.detach().cpu() for k, v in self.model.state_dict().items()})
        else:
            self.bad += 1
        logger.info("dev at step %d: %.4f (best %.4f at step %d)", step, value, self.best, self.best_step)
        return self.bad >= self.patience

    def restore(self) -> None:
        if self.best_state is not None:
            self.model.load_state_dict(self.best_state)
