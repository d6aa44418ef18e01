"""Moved to :mod:`st_magnitude.data.bm25` (one BM25 for the scaling teacher and Revela); this path is a shim."""

from __future__ import annotations

from st_magnitude._lazy import moved_exports

__getattr__, __dir__ = moved_exports(
    __name__, {"BM25Scorer": "st_magnitude.data.bm25", "tokenize": "st_magnitude.data.bm25"}
)
