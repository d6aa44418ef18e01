"""Losses for magnitude-aware retrieval (sentence-transformers v6 style).

- :class:`PartialNormInfoNCELoss` / :class:`CachedPartialNormInfoNCELoss`: InfoNCE (paper 000 eq. 2) with any
  similarity of the family (cosine, dot, qnorm, dnorm, learnable).
- :class:`MWLoss` / :class:`CachedMWLoss`: the Mann–Whitney AUC surrogate of paper 001 (eq. 3).

All detect a model converted by :func:`st_magnitude.apply_similarity` and then train the similarity it carries.
"""

from __future__ import annotations

from st_magnitude.losses._common import LossSimilarityWarning
from st_magnitude.losses.mw import CachedMWLoss, MWLoss, pairwise_softplus_sum
from st_magnitude.losses.partial_norm_infonce import CachedPartialNormInfoNCELoss, PartialNormInfoNCELoss

__all__ = [
    "CachedMWLoss",
    "CachedPartialNormInfoNCELoss",
    "LossSimilarityWarning",
    "MWLoss",
    "PartialNormInfoNCELoss",
    "pairwise_softplus_sum",
]
