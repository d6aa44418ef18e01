"""Magnitude diagnostics (paper 000 §4–6): norm statistics, Cohen's d, CV/ΔCV, component FIM, the κ rule,
cross-evaluation, and a markdown + PNG report (:func:`diagnose`, CLI ``st-magnitude diagnose``)."""

from __future__ import annotations

from st_magnitude._lazy import lazy_exports

__all__ = [
    "Diagnosis",
    "component_fim_table",
    "cross_evaluation",
    "diagnose",
    "doc_norm_cohens_d",
    "norm_stats",
    "recommend_normalization",
    "run_kappa",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        ".report": ("Diagnosis", "diagnose"),
        ".fim": ("component_fim_table", "recommend_normalization"),
        ".cross_eval": ("cross_evaluation",),
        ".norms": ("doc_norm_cohens_d", "norm_stats"),
        ".kappa_rule": ("run_kappa",),
    },
)
