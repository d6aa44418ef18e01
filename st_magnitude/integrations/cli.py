"""Moved: ``st-magnitude evaluate`` / ``mteb`` are :mod:`st_magnitude.cli.evaluate` and :mod:`st_magnitude.cli.mteb`;
the similarity choices and ``TRUST_HELP`` are in :mod:`st_magnitude.cli._args`. Removed in st-magnitude 0.3."""

from __future__ import annotations

from st_magnitude._lazy import moved_exports

_NEW = "st_magnitude.cli._args"
__getattr__, __dir__ = moved_exports(__name__, {"TRUST_HELP": _NEW, "similarity_arg": _NEW, "similarity_names": _NEW})
