"""The range of the document-norm bound M of a cosine / L2 export in which float32 scores stay finite and exact.

A store keeps the augmented vectors in float32. A document's squared norm is then M² (the extra coordinate
``sqrt(M² − ‖d‖²)`` fills it up), and float32 overflows above 3.4e38: with M = 1e20 every norm is ``inf`` and every
cosine score 0, and with M = 1e308 even the float64 M² overflows, so every later encode raises. M ≤ 1e18 keeps M²
at most 1e36, with a factor above 300 to spare for the query and the sum over coordinates (measured on a tiny qnorm
model: cosine top-10 identical to the trained ranking up to M = 1e19, all lost at 1e20).

Finite is not exact under L2: the squared distance ``‖q‖² + M² − 2 q·d`` is a float32 number of size M², whose
resolution (M² × 2⁻²³) swallows the differences in ``q·d`` once M is far above the document norms (measured, same
model, largest document norm 4.27: identical top-10 up to M = 50, 0.98 overlap at 500, 0.46 at 5,000). So M is also
bounded relative to the documents it is measured on: the margin over the largest sampled norm is at most
:data:`MAX_MARGIN`, and a given M at most :data:`MAX_MARGIN` times the largest norm of the sample when one is given.
Standard library only (the CLI checks its flags without importing torch).
"""

from __future__ import annotations

import math

#: the allowed bound M: 0 < M ≤ 1e18
MAX_NORM_RANGE = (0.0, 1e18)
#: M may be at most this many times the largest sampled document norm (and the margin at most this)
MAX_MARGIN = 10.0


def max_norm_problem(value: object) -> str | None:
    """Why ``value`` cannot be the bound M, or ``None`` when it can."""
    lo, hi = MAX_NORM_RANGE
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok and lo < value <= hi:
        return None
    return (
        f"the document-norm bound M must be a number with {lo:g} < M ≤ {hi:g} (above that, float32 vector stores "
        "overflow M² and every cosine / L2 score is lost); use about the largest document norm (--norm-texts "
        "measures it)"
    )


def margin_problem(value: object) -> str | None:
    """Why ``value`` cannot be the margin over the largest sampled norm, or ``None`` when it can."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok and 1.0 <= value <= MAX_MARGIN:
        return None
    return (
        f"the margin must lie in [1, {MAX_MARGIN:g}]: below 1 documents of the sample exceed M; far above the "
        "largest norm, float32 L2 distances (of size M²) can no longer tell the documents' scores apart"
    )
