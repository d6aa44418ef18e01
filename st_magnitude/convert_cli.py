"""Moved: ``st-magnitude strip`` / ``convert`` / ``inspect`` are :mod:`st_magnitude.cli.strip`,
:mod:`st_magnitude.cli.convert` and :mod:`st_magnitude.cli.inspect`. Importing this path warns; it is removed in
st-magnitude 0.3."""

from __future__ import annotations

import warnings

warnings.warn(
    "st_magnitude.convert_cli moved to st_magnitude.cli.strip / .convert / .inspect "
    "(the old path is removed in st-magnitude 0.3)",
    DeprecationWarning,
    stacklevel=2,
)
