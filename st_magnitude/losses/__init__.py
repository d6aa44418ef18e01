"""Losses for magnitude-aware retrieval (sentence-transformers v6 style).

- :class:`PartialNormInfoNCELoss` / :class:`CachedPartialNormInfoNCELoss`: InfoNCE (paper 000 eq. 2) with any
  similarity of the family (cosine, dot, qnorm, dnorm, learnable).
- :class:`MWLoss` / :class:`CachedMWLoss`: the Mann–Whitney AUC surrogate of paper 001 (eq. 3).
- :class:`InfoTNLoss`, :class:`L2DirLoss` / :class:`CachedL2DirLoss`: L2Dir (paper 002 eqs. 4–8) with the NAP head.
- :class:`BertRecipeLoss`, :class:`EttinRecipeLoss`, :class:`MarginContrastiveLoss`, :class:`MagnitudeMatryoshkaLoss`:
  the embedding-dimension scaling recipes (paper 003).
- :class:`RevelaLoss`: a retriever trained through a causal LM's in-batch attention (paper 004).

Losses that take a similarity detect a model converted by :func:`st_magnitude.apply_similarity` and then train the
similarity it carries.
"""

from __future__ import annotations

from st_magnitude._lazy import lazy_exports

__all__ = [
    "PAPER_TEMPERATURES",
    "BertRecipeLoss",
    "CachedL2DirLoss",
    "CachedMWLoss",
    "CachedPartialNormInfoNCELoss",
    "EttinRecipeLoss",
    "InfoTNCollapseWarning",
    "InfoTNLoss",
    "L2DirLoss",
    "LossSimilarityWarning",
    "MWLoss",
    "MagnitudeMatryoshkaLoss",
    "MarginContrastiveLoss",
    "PartialNormInfoNCELoss",
    "RevelaLoss",
    "pairwise_softplus_sum",
    "teacher_scores",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "._common": ("LossSimilarityWarning",),
        ".info_tn": ("InfoTNCollapseWarning", "InfoTNLoss"),
        ".l2dir": ("PAPER_TEMPERATURES", "L2DirLoss"),
        ".cached_l2dir": ("CachedL2DirLoss",),
        ".bert_recipe": ("BertRecipeLoss",),
        ".ettin_recipe": ("EttinRecipeLoss",),
        ".magnitude_matryoshka": ("MagnitudeMatryoshkaLoss",),
        ".margin_contrastive": ("MarginContrastiveLoss", "teacher_scores"),
        ".mw": ("CachedMWLoss", "MWLoss", "pairwise_softplus_sum"),
        ".partial_norm_infonce": ("CachedPartialNormInfoNCELoss", "PartialNormInfoNCELoss"),
        ".revela": ("RevelaLoss",),
    },
    moved={"RevelaLMCheckpointCallback": "st_magnitude.callbacks.revela"},  # deprecated: use LossStateCallback
)
