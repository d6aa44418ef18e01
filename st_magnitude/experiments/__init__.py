"""Experiments built from the library: the ``compare`` workflow behind ``st-magnitude compare``."""

from __future__ import annotations

from st_magnitude.experiments.compare import PROFILES, CompareConfig, run_compare

__all__ = ["PROFILES", "CompareConfig", "run_compare"]
