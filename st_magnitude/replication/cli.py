"""Moved: ``st-magnitude replicate`` is :mod:`st_magnitude.cli.replicate`. Removed in st-magnitude 0.3."""

from __future__ import annotations

from st_magnitude._lazy import moved_exports

_NEW = "st_magnitude.cli.replicate"
__getattr__, __dir__ = moved_exports(__name__, {"DEFAULT_REPORT": _NEW, "DEFAULT_RESULTS": _NEW})
