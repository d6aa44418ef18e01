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

* Whole evaluations: :func:`evaluate_model` (:mod:`.runner`, behind ``st-magnitude evaluate``), BEIR's own
  evaluation (:func:`beir_evaluate`, :mod:`.beir`) and mteb tasks from local folders (:mod:`.mteb`).
"""

from __future__ import annotations

from st_magnitude._lazy import lazy_exports

__all__ = [
    "ContrastiveEntropyEvaluator",
    "DualSimilarityEvaluator",
    "PooledAUCEvaluator",
    "RoleIREvaluator",
    "ann_search",
    "beir_evaluate",
    "contrastive_entropy",
    "encode_roles",
    "encode_to_store",
    "evaluate_model",
    "exact_search",
    "topk_search",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        ".entropy": ("ContrastiveEntropyEvaluator", "contrastive_entropy"),
        ".dual": ("DualSimilarityEvaluator",),
        ".auc": ("PooledAUCEvaluator",),
        ".ir": ("RoleIREvaluator", "exact_search"),
        ".search": ("ann_search", "topk_search"),
        "._retrieval": ("encode_roles",),
        ".embeddings_store": ("encode_to_store",),
        ".beir": ("beir_evaluate",),
        ".runner": ("evaluate_model",),
    },
)
