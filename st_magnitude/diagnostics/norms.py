"""Embedding-magnitude statistics of paper 000 (§4.3, App. N.2, O).

* Norm statistics by role (query / document): mean, std, min, max, CV.
* Cohen's d of document norms, relevant vs irrelevant (paper 000 §4.3, Fig. 4)::

      d = (μ_rel − μ_irrel) / σ_pooled,   σ_pooled = sqrt(((n1−1)s1² + (n2−1)s2²) / (n1+n2−2))

  (σ_pooled is not spelled out in the paper; this is the standard choice.) Labelled mode: relevant =
  documents judged relevant (grade > 0) to any evaluated query, irrelevant = the rest of the corpus (the
  corpus-level split implied by Table 25's NovelHopQA footnote). Label-free mode (paper: "retrieval scores as
  proxies", details unspecified): the top-k documents for each query *by cosine* are pseudo-relevant
  (:func:`label_free_doc_norm_cohens_d`). Cosine ignores the norms, so the pseudo-labels cannot select documents
  for their norm: ranking by dot or qnorm (∝ ‖d‖) would, and then d > 0 is built in (synthetic corpus whose norms
  carry no relevance signal, tests/diagnostics/test_norm_statistics.py: labelled d +0.05, top-10 by dot +3.05,
  top-10 by cosine +0.02).
* Effect-size bands (paper): |d| ≥ 0.8 large, ≥ 0.5 medium, ≥ 0.2 small, else negligible; d > 0 suggests qnorm
  (document magnitude carries relevance), d < 0 dnorm (paper 000 Fig. 5 caption).
* CV = σ/μ of query norms (App. N.2, eq. 27, in %), and ΔCV = CV_B / CV_A between two models (paper: DNorm-trained
  over Dot-trained).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np


class NormStats(dict):
    """``{"n", "mean", "std", "min", "max", "cv_percent"}`` of a set of norms."""


def norm_stats(norms: Sequence[float] | np.ndarray) -> NormStats:
    """Summary of L2 norms (std is the sample std, ddof=1; CV in %)."""
    x = np.asarray(norms, dtype=np.float64)
    if x.size == 0:
        raise ValueError("norm_stats needs at least one norm")
    std = float(x.std(ddof=1)) if x.size > 1 else 0.0
    mean = float(x.mean())
    return NormStats(
        n=int(x.size),
        mean=mean,
        std=std,
        min=float(x.min()),
        max=float(x.max()),
        cv_percent=coefficient_of_variation(x) if x.size > 1 else 0.0,
    )


def coefficient_of_variation(norms: Sequence[float] | np.ndarray) -> float:
    """CV = σ/μ of the norms, in % (paper 000 eq. 27; sample std)."""
    x = np.asarray(norms, dtype=np.float64)
    if x.size < 2:
        raise ValueError("CV needs at least two norms")
    mean = x.mean()
    if mean <= 0:
        raise ValueError("CV needs a positive mean norm")
    return float(100.0 * x.std(ddof=1) / mean)


def delta_cv(cv_reference: float, cv_other: float) -> float:
    """ΔCV = CV_other / CV_reference (paper 000 App. N.2: DNorm CV / Dot CV; high → dnorm, low → qnorm)."""
    if not cv_reference > 0:
        raise ValueError(f"the reference CV must be positive, got {cv_reference}")
    return float(cv_other / cv_reference)


def cohens_d(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Cohen's d = (mean(a) − mean(b)) / pooled std (ddof=1 per group)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    n1, n2 = a.size, b.size
    if n1 < 2 or n2 < 2:
        raise ValueError(f"Cohen's d needs at least two values per group, got {n1} and {n2}")
    pooled = math.sqrt(((n1 - 1) * a.var(ddof=1) + (n2 - 1) * b.var(ddof=1)) / (n1 + n2 - 2))
    scale = max(float(np.abs(a).max()), float(np.abs(b).max()))
    if pooled <= 1e-9 * scale:  # zero, or float rounding of equal values: d would be noise / noise
        raise ValueError(
            f"Cohen's d is undefined: both groups have (numerically) zero variance (pooled std {pooled:.3g} at "
            f"values up to {scale:.3g})"
        )
    return float((a.mean() - b.mean()) / pooled)


def effect_size_band(d: float) -> str:
    """Paper 000 bands: large |d| ≥ 0.8, medium ≥ 0.5, small ≥ 0.2, negligible below."""
    ad = abs(d)
    return "large" if ad >= 0.8 else "medium" if ad >= 0.5 else "small" if ad >= 0.2 else "negligible"


def doc_norm_cohens_d(doc_norms: dict[str, float], relevant_ids: Iterable[str]) -> tuple[float, int, int]:
    """Cohen's d of document norms, relevant vs all other documents; returns ``(d, n_relevant, n_irrelevant)``."""
    rel = set(relevant_ids) & set(doc_norms)
    a = [doc_norms[i] for i in rel]
    b = [v for k, v in doc_norms.items() if k not in rel]
    if len(a) < 2 or len(b) < 2:
        raise ValueError(
            f"Cohen's d needs at least two relevant and two irrelevant documents, got {len(a)} and {len(b)} "
            "(every document relevant? — paper 000 excludes such datasets, e.g. NovelHopQA)"
        )
    return cohens_d(a, b), len(a), len(b)


def pseudo_relevant_from_results(results: dict[str, dict[str, float]], k: int = 10) -> set[str]:
    """The union over queries of the top-k retrieved documents.

    For a label-free Cohen's d of document *norms* the results must come from a norm-blind score (cosine): top-k by
    dot or qnorm selects high-norm documents and makes d > 0 by construction. :func:`label_free_doc_norm_cohens_d`
    does the cosine ranking itself.
    """
    if k <= 0:
        raise ValueError(f"k must be positive, got {k}")
    out: set[str] = set()
    for hits in results.values():
        out.update(d for d, _ in sorted(hits.items(), key=lambda x: -x[1])[:k])
    return out


def label_free_doc_norm_cohens_d(
    query_embeddings, doc_embeddings, k: int = 10, chunk_size: int = 256
) -> tuple[float, int, int]:
    """Label-free Cohen's d of raw document norms: pseudo-relevant = union over queries of the top-k by cosine.

    Args:
        query_embeddings: ``[Q, n]`` raw query embeddings (array or CPU tensor).
        doc_embeddings: ``[M, n]`` raw document embeddings; their L2 norms are the compared values.
        k: documents per query taken as pseudo-relevant.
        chunk_size: queries scored at a time (memory).

    Returns ``(d, n_pseudo_relevant, n_rest)``. The ranking uses only directions, so rescaling any document leaves
    the pseudo-relevant set unchanged: a d far from 0 means norms go with direction-level relevance, not that the
    ranking picked them for their norm (the circularity of ranking by dot/qnorm).
    """
    q = np.asarray(query_embeddings, dtype=np.float64)
    d = np.asarray(doc_embeddings, dtype=np.float64)
    if q.ndim != 2 or d.ndim != 2 or q.shape[1] != d.shape[1]:
        raise ValueError(f"need [Q, n] queries and [M, n] documents, got {q.shape} and {d.shape}")
    if k <= 0:
        raise ValueError(f"k must be positive, got {k}")
    from st_magnitude.evaluation.search import topk_search
    from st_magnitude.similarity import get_similarity

    # the search core with the registry's cosine (documents normalised once per chunk, one matmul)
    _, top = topk_search(q, d, k, get_similarity("cosine"), query_chunk_size=chunk_size)
    pseudo = np.zeros(d.shape[0], dtype=bool)
    pseudo[top.numpy().ravel()] = True
    norms = np.linalg.norm(d, axis=1)
    a, b = norms[pseudo], norms[~pseudo]
    if a.size < 2 or b.size < 2:
        raise ValueError(
            f"label-free Cohen's d needs at least two pseudo-relevant and two other documents, got {a.size} and "
            f"{b.size} (lower k or use a larger corpus)"
        )
    return cohens_d(a, b), int(a.size), int(b.size)
