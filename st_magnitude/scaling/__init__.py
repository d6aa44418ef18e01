"""Embedding-dimension scaling (paper 003): law fits, cost-aware choice of (N, D), plots.

The offline BM25 teacher is :class:`st_magnitude.data.bm25.BM25Scorer` (shared with Revela's grouping).

Public API::

    from st_magnitude.scaling import fit_dimension_law, fit_joint_law, optimal_allocation
"""

from __future__ import annotations

from st_magnitude._lazy import lazy_exports

__all__ = [
    "PAPER_DIMENSION_LAWS",
    "dimension_law",
    "fit_dimension_law",
    "fit_joint_law",
    "optimal_allocation",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        ".fit": ("PAPER_DIMENSION_LAWS", "dimension_law", "fit_dimension_law", "fit_joint_law"),
        ".cost": ("optimal_allocation",),
    },
)
