"""Moved to :mod:`st_magnitude.modules.revela_attention` (an attention function, not a loss); this path is a shim."""

from __future__ import annotations

from st_magnitude._lazy import moved_exports
from st_magnitude.modules import revela_attention as _new

__getattr__, __dir__ = moved_exports(__name__, dict.fromkeys([*_new.__all__, "SUPPORTED_MODEL_TYPES"], _new.__name__))
