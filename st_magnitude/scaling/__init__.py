"""Embedding-dimension scaling (paper 003): law fits, cost-aware choice of (N, D), plots.

The offline BM25 teacher is :class:`st_magnitude.data.bm25.BM25Scorer` (shared with Revela's grouping).

Public API::

    from st_magnitude.scaling import fit_dimension_law, fit_joint_law, optimal_allocation
"""

from __future__ import annotations

from st_magnitude._lazy import lazy_exports

__all__ = [
    "PAPER_DIMENSION_LAWS",
    "PAPER_JOINT_LAWS",
    "SCORING_MODES",
    "Allocation",
    "DimensionLawFit",
    "JointLawFit",
    "allocate",
    "budget_curve",
    "dimension_law",
    "encoding_flops",
    "extrapolation_check",
    "fit_dimension_law",
    "fit_joint_law",
    "index_bytes",
    "joint_law",
    "optimal_allocation",
    "r_squared",
    "scoring_flops",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        ".cost": (
            "SCORING_MODES",
            "Allocation",
            "allocate",
            "budget_curve",
            "encoding_flops",
            "index_bytes",
            "optimal_allocation",
            "scoring_flops",
        ),
        ".fit": (
            "PAPER_DIMENSION_LAWS",
            "PAPER_JOINT_LAWS",
            "DimensionLawFit",
            "JointLawFit",
            "dimension_law",
            "extrapolation_check",
            "fit_dimension_law",
            "fit_joint_law",
            "joint_law",
            "r_squared",
        ),
    },
)
