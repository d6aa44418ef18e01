"""Numbers read from a file: each one a JSON number (never a string, a boolean or null read as one), finite, inside
its range and, where it counts something, an integer. A refusal is a ``ValueError`` naming where the value sits
(``per_query.ndcg@10[3]``); the reader of the file adds the file's name (:class:`InputFileError`)."""

from __future__ import annotations

import math
from typing import Any

from st_magnitude._trust.json_files import _finite, _kind, _short

__all__ = ["check_number", "check_numbers", "number_range"]


def number_range(low: float, high: float) -> str:
    """``[0, 1]``, ``[0, inf)``, ``(-inf, inf)``: the range as the messages write it."""
    left = "(-inf" if low == -math.inf else f"[{low:g}"
    right = "inf)" if high == math.inf else f"{high:g}]"
    return f"{left}, {right}"


def check_number(
    value: Any, where: str, *, low: float = -math.inf, high: float = math.inf, integer: bool = False
) -> None:
    """``ValueError`` ``"<where>: is …"`` unless ``value`` is a finite number (an ``int`` where ``integer``) in
    ``[low, high]``."""
    if isinstance(value, str):
        raise ValueError(f"{where}: is the string {_short(value)}, not a number")
    if isinstance(value, bool) or value is None:
        raise ValueError(f"{where}: is {'null' if value is None else str(value).lower()}, not a number")
    if not isinstance(value, int | float):
        raise ValueError(f"{where}: is {_kind(value)}, not a number")
    if not _finite(value):
        raise ValueError(f"{where}: is {value}, not a finite number")
    if integer and not isinstance(value, int):
        raise ValueError(f"{where}: is {value!r}, not an integer")
    if not low <= value <= high:
        raise ValueError(f"{where}: is {value!r}, outside {number_range(low, high)}")


def check_numbers(
    values: Any, where: str, *, low: float = -math.inf, high: float = math.inf, integer: bool = False
) -> None:
    """:func:`check_number` for every item of the list ``values`` (named ``<where>[i]``); ``ValueError`` for a
    value that is no list."""
    if not isinstance(values, list):
        raise ValueError(f"{where}: must be a list of {'integers' if integer else 'numbers'}, not {_kind(values)}")
    for i, value in enumerate(values):
        check_number(value, f"{where}[{i}]", low=low, high=high, integer=integer)
