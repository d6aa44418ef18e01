"""Integrations: local BEIR folders (:mod:`.data`), where data lives (:mod:`.data_home`), BEIR (:mod:`.beir`), mteb
(:mod:`.mteb`), model loading and role checks (:mod:`.models`), and the ``st-magnitude evaluate`` /
``st-magnitude mteb run`` commands (:mod:`.cli`).

mteb is imported lazily (it needs Python >= 3.11 and is slow to import)."""

from __future__ import annotations

from st_magnitude._lazy import lazy_exports

__all__ = [
    "BEIRData",
    "PrecomputedAdapter",
    "STQueryDocAdapter",
    "beir_evaluate",
    "beir_search",
    "describe_similarity",
    "doc_text",
    "evaluate_folders",
    "evaluate_model",
    "has_roles",
    "load_beir",
    "load_model",
    "load_model_and_source",
    "make_beir_retriever",
    "positive_pairs",
    "raw_model",
    "require_roles",
    "resolve_data_dir",
    "resolve_dataset",
    "subsample",
    "validate_retrieval_data",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        ".beir": ("PrecomputedAdapter", "STQueryDocAdapter", "beir_evaluate", "beir_search", "make_beir_retriever"),
        ".data": ("BEIRData", "doc_text", "load_beir", "positive_pairs", "subsample", "validate_retrieval_data"),
        ".data_home": ("resolve_data_dir", "resolve_dataset"),
        ".evaluate": ("evaluate_folders", "evaluate_model"),
        ".models": (
            "describe_similarity",
            "has_roles",
            "load_model",
            "load_model_and_source",
            "raw_model",
            "require_roles",
        ),
    },
)
