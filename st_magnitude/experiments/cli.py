"""Moved: ``st-magnitude compare`` is :mod:`st_magnitude.cli.compare`. Removed in st-magnitude 0.3."""

from __future__ import annotations

from st_magnitude._lazy import moved_exports

__getattr__, __dir__ = moved_exports(__name__, {"INTERRUPTED": "st_magnitude.cli.compare"})
