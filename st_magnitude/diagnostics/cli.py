"""Moved: ``st-magnitude diagnose`` is :mod:`st_magnitude.cli.diagnose`. Importing this path warns; it is removed in
st-magnitude 0.3."""

from __future__ import annotations

import warnings

warnings.warn(
    "st_magnitude.diagnostics.cli moved to st_magnitude.cli.diagnose (the old path is removed in st-magnitude 0.3)",
    DeprecationWarning,
    stacklevel=2,
)
