"""Constructor checks shared by the losses: a scale or temperature is a finite number > 0.

``inf`` or ``nan`` would build and then return NaN losses (``inf · 0``, ``nan`` logits); ``0`` divides by zero; a
negative value inverts the ranking. The string ``"learnable"`` is passed through untouched: a loss that accepts a
learnable temperature handles it itself.
"""

from __future__ import annotations

import math

__all__ = ["LEARNABLE", "positive_finite"]

#: the one non-numeric value a scale / temperature argument may take (the loss then learns it)
LEARNABLE = "learnable"


def positive_finite(name: str, value: object, meaning: str = "") -> object:
    """``value`` as a float when it is a finite number > 0 (``"learnable"`` is returned as it is); otherwise a
    ``ValueError`` naming ``name``, the allowed range and what the value means (``meaning``, e.g. ``"1/temperature"``).
    """
    if value == LEARNABLE and isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        what = f" ({meaning})" if meaning else ""
        raise ValueError(f"{name}{what} must be a finite number in 0 < {name} < inf, got {value!r}")
    return float(value)
