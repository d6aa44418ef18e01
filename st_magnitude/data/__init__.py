"""Data: local BEIR folders and where they live, the evaluation sets, the BEIR title + text join, Okapi BM25, and
Revela's related-chunk batches.

- :func:`load_beir`, :class:`BEIRData`, :func:`subsample` (:mod:`~st_magnitude.data.beir`): a local BEIR folder,
  validated line by line; :mod:`~st_magnitude.data.home`: the one data setting (``$ST_MAGNITUDE_DATA``);
  :mod:`~st_magnitude.data.eval_set`: the evaluation sets and training pairs of compare and replicate.

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
    "BEIRData",
    "BM25Scorer",
    "RevelaDataCollator",
    "RevelaGroupBatchSampler",
    "build_revela_dataset",
    "doc_text",
    "load_beir",
    "subsample",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        ".beir": ("BEIRData", "load_beir", "subsample"),
        ".bm25": ("BM25Scorer",),
        ".revela": ("RevelaDataCollator", "RevelaGroupBatchSampler", "build_revela_dataset"),
        ".text": ("doc_text",),
    },
)
