"""Sentence-transformers evaluators that honour query/document roles.

* :class:`RoleIREvaluator` — retrieval with ``encode_query`` / ``encode_document`` and the model's own similarity,
  exact search, pytrec_eval metrics (via BEIR), optional pooled AUC.
* :class:`PooledAUCEvaluator` — pooled ROC-AUC over queries (paper 001 §5.1) with a ROC PNG.
* :class:`DualSimilarityEvaluator` — dot vs cosine on the same embeddings, magnitude-collapse detector
  (paper 000 App. N.3).

* :class:`ContrastiveEntropyEvaluator` — cross-entropy of each (query, positive) against 256 uniformly sampled
  corpus passages (paper 003 §3.6.1), seeded.

* Search at scale: :func:`topk_search` / :func:`exact_search` (one corpus pass, running top-k), embeddings on disk
  (:class:`EmbeddingStore`, :func:`encode_to_store`), optional faiss inner-product backend (:func:`ann_search`).
"""

from __future__ import annotations

from st_magnitude._lazy import lazy_exports

__all__ = [
    "AUCPools",
    "ContrastiveEntropyEvaluator",
    "DualSimilarityEvaluator",
    "MagnitudeCollapseDetected",
    "PooledAUCEvaluator",
    "RoleIREvaluator",
    "doc_texts",
    "encode_roles",
    "exact_search",
    "per_query_auc",
    "plot_roc",
    "pooled_auc_pools",
    "pooled_auc_score",
    "resolve_score_fn",
    "retrieval_metrics",
    "contrastive_entropy",
    "sample_negatives",
    "EmbeddingStore",
    "encode_to_store",
    "topk_search",
    "ann_search",
    "build_faiss_index",
    "search_recall",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        ".auc": (
            "AUCPools",
            "PooledAUCEvaluator",
            "per_query_auc",
            "plot_roc",
            "pooled_auc_pools",
            "pooled_auc_score",
        ),
        ".entropy": ("ContrastiveEntropyEvaluator", "contrastive_entropy", "sample_negatives"),
        ".dual": ("DualSimilarityEvaluator", "MagnitudeCollapseDetected"),
        ".embeddings_store": ("EmbeddingStore", "encode_to_store"),
        ".search": ("ann_search", "build_faiss_index", "search_recall", "topk_search"),
        "._retrieval": ("encode_roles", "resolve_score_fn"),
        ".ir": ("RoleIREvaluator", "doc_texts", "exact_search", "retrieval_metrics"),
    },
)
