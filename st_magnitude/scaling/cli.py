"""Moved: ``st-magnitude scaling`` is :mod:`st_magnitude.cli.scaling`. Importing this path warns; it is removed in
st-magnitude 0.3."""

from __future__ import annotations

import warnings

warnings.warn(
    "st_magnitude.scaling.cli moved to st_magnitude.cli.scaling (the old path is removed in st-magnitude 0.3)",
    DeprecationWarning,
    stacklevel=2,
)
