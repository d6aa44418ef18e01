"""``replicate --set KEY=VALUE``: a profile setting replaced, checked like the profile's own settings.

A value is read as JSON (``5``, ``0.01``, ``true``, ``null``, ``[1, 2]``), else as text. It must keep the type of
the setting it replaces (an integer stays an integer, a flag ``true``/``false``, a list a list), numbers must be
finite and not negative (no profile has a negative setting), and a loss scale or temperature (``scale``,
``temperature``, ``tn_temperature``, …) must lie in float32's normal range: a value that overflows to ``inf`` or
underflows to 0 in float32 (``1e-320``, ``1e308``) would train on NaN or infinite losses.
"""

from __future__ import annotations

import math
from typing import Any

from st_magnitude._trust import InputFileError, parse_json_line

__all__ = ["FLOAT32_RANGE", "apply_overrides", "parse_set"]

#: the range of a loss scale or temperature: float32's smallest normal number and its largest finite one
FLOAT32_RANGE = (1.1754943508222875e-38, 3.4028234663852886e38)


def parse_set(items: list[str]) -> dict[str, Any]:
    """``["KEY=VALUE", ...]`` as ``{KEY: value}`` (JSON when the value parses as JSON, else the text)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set takes KEY=VALUE, got {item!r}")
        try:
            out[key] = parse_json_line(text, "--set", 1)
        except InputFileError:  # not JSON (NaN and Infinity included): the text itself
            out[key] = text
    return out


def _is_scale(key: str) -> bool:
    return key == "scale" or key.endswith("_scale") or "temperature" in key


def _number(key: str, value: Any, integer: bool) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"--set {key}: must be {'an integer' if integer else 'a number'}, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"--set {key}: must be a finite number, got {value!r}")
    if integer and value != int(value):
        raise ValueError(f"--set {key}: must be an integer, got {value!r}")
    if value < 0:
        raise ValueError(f"--set {key}: must be ≥ 0, got {value!r}")
    if _is_scale(key):
        lo, hi = FLOAT32_RANGE
        if not lo <= value <= hi:
            raise ValueError(
                f"--set {key}: a loss scale or temperature must lie in float32's normal range [{lo:.7g}, {hi:.7g}] "
                f"(it is used in float32: beyond, it overflows to inf or underflows to 0), got {value!r}"
            )
    return int(value) if integer else float(value)


def _checked(key: str, old: Any, value: Any) -> Any:
    """``value`` for the setting ``key`` whose profile value is ``old``, or a ``ValueError`` naming what it must be."""
    if isinstance(old, bool):
        if not isinstance(value, bool):
            raise ValueError(f"--set {key}: must be true or false, got {value!r}")
        return value
    if isinstance(old, (int, float)):
        return _number(key, value, integer=isinstance(old, int))
    if old is None:  # an optional count or limit ("null": none)
        return None if value is None else _number(key, value, integer=isinstance(value, int))
    if isinstance(old, str):
        if not isinstance(value, str) or not value:
            raise ValueError(f"--set {key}: must be a non-empty text, got {value!r}")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"--set {key}: holds bytes that are not UTF-8: {value!r}") from None
        return value
    if isinstance(old, (list, dict)) and not isinstance(value, type(old)):
        kind = "a list" if isinstance(old, list) else "an object"
        raise ValueError(f"--set {key}: must be {kind} in JSON (like {old!r}), got {value!r}")
    return value


def apply_overrides(settings: dict[str, Any], overrides: dict[str, Any], where: str) -> None:
    """Replace ``settings`` (of claim/profile ``where``) with ``overrides`` in place, each checked by the type and
    range of the setting it replaces."""
    for key, value in overrides.items():
        if key not in settings:
            raise ValueError(f"unknown setting {key!r} for claim {where}; valid: {', '.join(settings)}")
        settings[key] = _checked(key, settings[key], value)
