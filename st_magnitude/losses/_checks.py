"""Constructor checks shared by the losses: a scale or temperature is a number in :data:`SAFE_RANGE`.

``inf`` or ``nan`` would build and then return NaN losses (``inf · 0``, ``nan`` logits); ``0`` divides by zero; a
negative value inverts the ranking. A value that passes ``0 < x < inf`` can still break the float32 arithmetic of
the loss: a scale of ``1e308`` is ``inf`` once it multiplies a float32 score (NaN loss), a temperature of ``5e-324``
is ``0`` in float32 (scores divided by it are ``inf``), and ``10**400`` is not even a float (``OverflowError``).

So every scale and temperature lies in ``[1e-6, 1e6]`` (:data:`SAFE_RANGE`). A scale multiplies the scores and a
temperature divides them, so the factor applied to a score is at most ``1e6``: float32 logits stay finite for every
score up to ``1e32`` in magnitude (float32 ends at 3.4e38), far beyond what any similarity of the package produces
(cosine and sim_TN lie in [-1, 1]; dot products of embeddings whose norms reach 1e4 are 1e8). The bounds are
symmetric because a loss built from a temperature τ often multiplies by ``1/τ`` (``EttinRecipeLoss``, the learnable
scale): both lie in the same range. The defaults (InfoNCE 20, MW τ 0.01, L2Dir 0.02, Revela 1e-4) sit well inside.

A small positive constant that is no scale (Revela's ``eps``) is checked by :func:`positive_float32`: a float32
normal number (``1e-300`` would be ``0`` in float32).

:func:`positive_finite` is the one scale / temperature check of the package: every loss calls it (directly, or
through :func:`~st_magnitude.losses._temperature.parse_scale` / ``parse_temperature``). The string ``"learnable"``
is passed through untouched unless ``learnable=False``: a loss that accepts a learnable temperature handles it
itself (:class:`~st_magnitude.losses._temperature.LearnableScale`, clamped to ``1 ≤ scale ≤ 100``); one that does
not refuses it.
"""

from __future__ import annotations

import math

__all__ = ["FLOAT32_MAX", "FLOAT32_TINY", "LEARNABLE", "SAFE_RANGE", "positive_finite", "positive_float32"]

#: the one non-numeric value a scale / temperature argument may take (the loss then learns it)
LEARNABLE = "learnable"

#: every scale and temperature lies in ``[lo, hi]`` (see the module docstring for why this keeps float32 finite)
SAFE_RANGE = (1e-6, 1e6)

#: the largest finite float32 and the smallest normal one
FLOAT32_MAX = 3.4028234663852886e38
FLOAT32_TINY = 1.1754943508222875e-38


def _as_float(value: object) -> float | None:
    """``value`` as a finite float when it is a real number (not a bool), else ``None``; a Python int too large for a
    float is ``None`` too, never an ``OverflowError``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _refuse(name: str, value: object, meaning: str, allowed: str) -> ValueError:
    what = f" ({meaning})" if meaning else ""
    shown = (
        repr(value) if not isinstance(value, int) or abs(value) < 10**30 else f"an integer of {len(str(value))} digits"
    )
    return ValueError(f"{name}{what} must be a finite number in {allowed}, got {shown}")


def positive_finite(name: str, value: object, meaning: str = "", *, learnable: bool = True) -> object:
    """The one scale / temperature check of the losses: ``value`` as a float when it is a number in
    :data:`SAFE_RANGE`; ``"learnable"`` is returned as it is when ``learnable`` (the loss then learns the value, see
    :mod:`~st_magnitude.losses._temperature`). Anything else raises a ``ValueError`` naming ``name``, the allowed range
    and what the value means (``meaning``, e.g. ``"1/temperature"``), and ``"learnable"`` when it is allowed.
    """
    if learnable and value == LEARNABLE and isinstance(value, str):
        return value
    lo, hi = SAFE_RANGE
    number = _as_float(value)
    if number is None or not lo <= number <= hi:
        if learnable:
            meaning = f"{meaning}; or {LEARNABLE!r}" if meaning else f"or {LEARNABLE!r}"
        raise _refuse(name, value, meaning, f"{lo:g} ≤ {name} ≤ {hi:g}")
    return number


def positive_float32(name: str, value: object, meaning: str = "", hi: float = FLOAT32_MAX) -> float:
    """``value`` as a float when it is a positive normal float32 number (at most ``hi``); otherwise a ``ValueError``
    naming the range."""
    number = _as_float(value)
    if number is None or not FLOAT32_TINY <= number <= hi:
        raise _refuse(name, value, meaning, f"{FLOAT32_TINY:.4g} ≤ {name} ≤ {hi:g}")
    return number
