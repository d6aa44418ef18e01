"""Experiments built from the library: the ``compare`` workflow behind ``st-magnitude compare``."""

from __future__ import annotations

from st_magnitude._lazy import lazy_exports

__all__ = [
    "CompareConfig",
    "run_compare",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        ".config": ("CompareConfig",),
        ".compare": ("run_compare",),
    },
)
