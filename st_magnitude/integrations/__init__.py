"""Integrations: local BEIR folders (:mod:`.data`), BEIR (:mod:`.beir`), mteb (:mod:`.mteb`), model loading and
role checks (:mod:`.models`), and the ``st-magnitude evaluate`` / ``st-magnitude mteb run`` commands (:mod:`.cli`).

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
    "make_beir_retriever",
    "raw_model",
    "require_roles",
    "subsample",
    "validate_retrieval_data",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        ".beir": ("PrecomputedAdapter", "STQueryDocAdapter", "beir_evaluate", "beir_search", "make_beir_retriever"),
        ".data": ("BEIRData", "doc_text", "load_beir", "subsample", "validate_retrieval_data"),
        ".evaluate": ("evaluate_folders", "evaluate_model"),
        ".models": ("describe_similarity", "has_roles", "load_model", "raw_model", "require_roles"),
    },
)
