"""Training and corpus data: the BEIR title + text join, Okapi BM25, and Revela's related-chunk batches.

- :func:`doc_text` (:mod:`~st_magnitude.data.text`): the one title + text join (evaluation, integrations, Revela).
- :class:`BM25Scorer`, :func:`bm25_scores` (:mod:`~st_magnitude.data.bm25`): one BM25 for the dimension-scaling
  teacher (paper 003) and Revela's BM25 grouping.
- :func:`build_revela_dataset`, :class:`RevelaGroupBatchSampler`, :class:`RevelaDataCollator`
  (:mod:`~st_magnitude.data.revela`): batches of related chunks for :class:`~st_magnitude.losses.RevelaLoss`
  (paper 004).
"""

from __future__ import annotations

from st_magnitude._lazy import lazy_exports

__all__ = [
    "BM25Scorer",
    "RevelaDataCollator",
    "RevelaGroupBatchSampler",
    "build_revela_dataset",
    "doc_text",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        ".bm25": ("BM25Scorer",),
        ".revela": ("RevelaDataCollator", "RevelaGroupBatchSampler", "build_revela_dataset"),
        ".text": ("doc_text",),
    },
)
