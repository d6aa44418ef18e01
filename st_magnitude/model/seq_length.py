"""``max_seq_length`` within what the backbone takes (:mod:`st_magnitude._trust.positions` holds the rule).

:func:`backbone_limit` reads the limit from the loaded model's transformer configs; :func:`set_max_seq_length` sets
a value after checking it against that limit, so ``--max-seq-length 100000`` is one line naming the value and the
allowed maximum instead of a ``RuntimeError`` at the first long text.
"""

from __future__ import annotations

from typing import Any

from st_magnitude._trust.positions import check_max_seq_length, position_limit

__all__ = ["backbone_limit", "check_model_max_seq_length", "set_max_seq_length"]


def backbone_limit(model: Any) -> tuple[int, str] | None:
    """``(tokens, why)``: the fewest tokens any transformer module of ``model`` takes, ``None`` when no module's
    config states a position limit."""
    limits = []
    modules = model.modules() if hasattr(model, "modules") else []
    for module in modules:
        config = getattr(getattr(module, "auto_model", None), "config", None)
        to_dict = getattr(config, "to_dict", None)
        if to_dict is not None:
            found = position_limit(to_dict())
            if found is not None:
                limits.append(found)
    return min(limits) if limits else None


def check_model_max_seq_length(model: Any, value: Any, what: str = "max_seq_length") -> None:
    """ValueError naming ``what`` when ``value`` is more tokens than the backbone of ``model`` takes."""
    problem = check_max_seq_length(value, backbone_limit(model))
    if problem:
        raise ValueError(f"{what} {problem}")


def set_max_seq_length(model: Any, value: int, what: str = "max_seq_length") -> None:
    """``model.max_seq_length = value`` for a positive ``value`` the backbone takes (ValueError naming ``what``
    otherwise)."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")
    check_model_max_seq_length(model, value, what)
    model.max_seq_length = value
