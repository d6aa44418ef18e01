"""Losses for magnitude-aware retrieval (sentence-transformers v6 style).

- :class:`PartialNormInfoNCELoss` / :class:`CachedPartialNormInfoNCELoss`: InfoNCE (paper 000 eq. 2) with any
  similarity of the family (cosine, dot, qnorm, dnorm, learnable).
- :class:`MWLoss` / :class:`CachedMWLoss`: the Mann–Whitney AUC surrogate of paper 001 (eq. 3).
- :class:`InfoTNLoss` / :class:`CachedInfoTNLoss`, :class:`L2DirLoss` / :class:`CachedL2DirLoss`: L2Dir (paper 002
  eqs. 4–8) with the NAP head.
- :class:`BertRecipeLoss`, :class:`EttinRecipeLoss`, :class:`MarginContrastiveLoss`, :class:`MagnitudeMatryoshkaLoss`:
  the embedding-dimension scaling recipes (paper 003).
- :class:`RevelaLoss`: a retriever trained through a causal LM's in-batch attention (paper 004).

Losses that take a similarity detect a model converted by :func:`st_magnitude.apply_similarity` and then train the
similarity it carries.

Which losses exist, where each lives and how ``st-magnitude compare`` builds it is said once, in
:mod:`st_magnitude.losses._registry`.
"""

from __future__ import annotations

from st_magnitude._lazy import lazy_exports
from st_magnitude.losses._registry import lazy_export_table, loss_class_names

# both derived from the one registry (st_magnitude/losses/_registry.py): a new loss is one line there
__all__ = list(loss_class_names())

__getattr__, __dir__ = lazy_exports(__name__, lazy_export_table())
