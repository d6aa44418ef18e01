"""Magnitude diagnostics (paper 000 §4–6): norm statistics, Cohen's d, CV/ΔCV, component FIM, the κ rule,
cross-evaluation, and a markdown + PNG report (:func:`diagnose`, CLI ``st-magnitude diagnose``)."""

from __future__ import annotations

from st_magnitude._lazy import lazy_exports

__all__ = [
    "EVAL_SIMILARITIES",
    "KAPPA_MIN_PAIRS_PER_DIM",
    "ConditionNumberResult",
    "DatasetDiagnosis",
    "Diagnosis",
    "coefficient_of_variation",
    "cohens_d",
    "component_fim",
    "component_fim_table",
    "condition_number",
    "cross_evaluation",
    "cross_evaluation_from_embeddings",
    "delta_cv",
    "diagnose",
    "doc_norm_cohens_d",
    "effect_size_band",
    "fisher_matrix",
    "format_matrix",
    "kappa_min_pairs",
    "kappa_pairs",
    "label_free_doc_norm_cohens_d",
    "norm_stats",
    "pair_gradients",
    "pseudo_relevant_from_results",
    "recommend_normalization",
    "run_kappa",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        ".cross_eval": ("EVAL_SIMILARITIES", "cross_evaluation", "cross_evaluation_from_embeddings", "format_matrix"),
        ".fim": (
            "KAPPA_MIN_PAIRS_PER_DIM",
            "ConditionNumberResult",
            "component_fim",
            "component_fim_table",
            "condition_number",
            "fisher_matrix",
            "kappa_min_pairs",
            "pair_gradients",
            "recommend_normalization",
        ),
        ".norms": (
            "coefficient_of_variation",
            "cohens_d",
            "delta_cv",
            "doc_norm_cohens_d",
            "effect_size_band",
            "label_free_doc_norm_cohens_d",
            "norm_stats",
            "pseudo_relevant_from_results",
        ),
        ".kappa_rule": ("kappa_pairs", "run_kappa"),
        ".report": ("DatasetDiagnosis", "Diagnosis", "diagnose"),
    },
)
