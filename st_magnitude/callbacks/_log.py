"""Adding values to a Trainer log entry from a callback's ``on_log``."""

from __future__ import annotations

from typing import Any


def add_to_log(state: Any, logs: dict[str, Any] | None, values: dict[str, Any]) -> None:
    """Add ``values`` to ``logs`` and to the copy of it the Trainer already appended to ``state.log_history``.

    The Trainer appends the log entry to ``log_history`` before it calls ``on_log``, so a callback that only updated
    ``logs`` would reach the reporting integrations that run after it but not ``trainer.state.log_history``.
    """
    if logs is not None:
        logs.update(values)
    if state.log_history and state.log_history[-1].get("step") == state.global_step:
        state.log_history[-1].update(values)
