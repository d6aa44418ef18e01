"""Moved to :mod:`st_magnitude.data.revela` (BM25 to :mod:`st_magnitude.data.bm25`); this path is a shim."""

from __future__ import annotations

from st_magnitude import data as _data
from st_magnitude._lazy import moved_exports

_OLD_NAMES = {n for n, target in vars(_data)["_lazy_targets"].items() if target == "st_magnitude.data.revela"}

__getattr__, __dir__ = moved_exports(
    __name__, {**dict.fromkeys(_OLD_NAMES, "st_magnitude.data.revela"), "bm25_scores": "st_magnitude.data.bm25"}
)
