"""The retrieval core shared by the evaluators (:mod:`.ir`, :mod:`.auc`, :mod:`.dual`) and below all of them.

Role-aware encoding, the scoring function, chunked scoring, the pooled-AUC pools and score (the protocol is in
:mod:`st_magnitude.evaluation.auc`), and the evaluators' CSV log. The public names are re-exported from
:mod:`.ir` and :mod:`.auc`, where users import them.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from scipy.stats import rankdata
from torch import Tensor

from st_magnitude.similarity import Similarity, get_similarity

ScoreFn = Callable[[Tensor, Tensor], Tensor]

#: scores per query chunk kept in memory at once (query_chunk × corpus floats)
_MAX_CHUNK_ELEMENTS = 1 << 25


def encode_roles(
    model,
    queries: Sequence[str],
    documents: Sequence[str],
    *,
    batch_size: int = 32,
    show_progress_bar: bool | None = None,
) -> tuple[Tensor, Tensor]:
    """Encode queries with ``encode_query`` and documents with ``encode_document``; float32 CPU tensors."""
    if len(documents) == 0:
        raise ValueError("The corpus is empty: retrieval evaluation needs at least one document.")
    if len(queries) == 0:
        raise ValueError("No queries to evaluate.")
    kw = {"batch_size": batch_size, "convert_to_tensor": True, "show_progress_bar": show_progress_bar}
    q = model.encode_query(list(queries), **kw)
    d = model.encode_document(list(documents), **kw)
    return q.detach().float().cpu(), d.detach().float().cpu()


def resolve_score_fn(model, similarity: str | Similarity | ScoreFn | None = None) -> tuple[ScoreFn, str]:
    """The scoring function and a description of it.

    ``None`` → the model's own ``model.similarity`` (for converted models "dot" on role-specific outputs).
    A name or :class:`~st_magnitude.similarity.Similarity` → that family member, applied to the model's outputs
    (queries first). Any other callable ``fn(Q[B, n], D[M, n]) -> [B, M]`` is used as is.
    """
    if similarity is None:
        name = getattr(model, "similarity_fn_name", None) or "model"
        return model.similarity, f"model.similarity ({name})"
    if isinstance(similarity, (str, Similarity)):
        sim = get_similarity(similarity)
        return sim, f"{sim.name} ({sim.extra_repr()})"
    if callable(similarity):
        return similarity, getattr(similarity, "__name__", type(similarity).__name__)
    raise TypeError(f"similarity must be None, a similarity name, a Similarity or a callable; got {similarity!r}")


def _score(score_fn: ScoreFn, q: Tensor, d: Tensor) -> Tensor:
    with torch.no_grad():
        s = score_fn(q, d)
    if not isinstance(s, Tensor):
        s = torch.as_tensor(s)
    s = s.float()
    if torch.isnan(s).any():
        n = int(torch.isnan(s).sum())
        warnings.warn(
            f"{n} NaN retrieval score(s): the embeddings contain NaN/inf (a collapsed or diverged model?). "
            "They are ranked last.",
            RuntimeWarning,
            stacklevel=3,
        )
        s = torch.where(torch.isnan(s), torch.full_like(s, -math.inf), s)
    return s


def _query_chunks(n_queries: int, n_docs: int, query_chunk_size: int | None) -> range:
    size = query_chunk_size or max(1, min(n_queries, _MAX_CHUNK_ELEMENTS // max(1, n_docs)))
    return range(0, n_queries, size)


@dataclass
class AUCPools:
    """Positive and negative scores with the index of the query each came from."""

    positives: np.ndarray
    negatives: np.ndarray
    positive_query: np.ndarray
    negative_query: np.ndarray


def pooled_auc_pools(
    query_embeddings: Tensor,
    corpus_embeddings: Tensor,
    query_ids: Sequence[str],
    corpus_ids: Sequence[str],
    qrels: dict[str, dict[str, int]],
    score_fn: ScoreFn | None = None,
    *,
    n_negatives: int = 500,
    ignore_identical_ids: bool = True,
) -> AUCPools:
    """Score every query against the whole corpus; keep all positives and the top ``n_negatives`` non-positives."""
    if n_negatives <= 0:
        raise ValueError(f"n_negatives must be positive, got {n_negatives}")
    if len(corpus_ids) == 0:
        raise ValueError("The corpus is empty: pooled AUC needs at least one document.")
    _refuse_non_finite(query_embeddings, "query", query_ids)
    _refuse_non_finite(corpus_embeddings, "document", corpus_ids)
    score_fn = score_fn or (lambda q, d: q @ d.T)
    pos_of = {cid: i for i, cid in enumerate(corpus_ids)}
    pos, neg, pos_q, neg_q = [], [], [], []
    chunks = _query_chunks(len(query_ids), len(corpus_ids), None)
    for start in chunks:
        stop = min(start + chunks.step, len(query_ids))
        scores = _score(score_fn, query_embeddings[start:stop], corpus_embeddings)
        _refuse_non_finite(scores, "query", query_ids[start:stop], offset=start, scores=True)
        masked = scores  # masked in place: the positives are gathered (copied) out of each row before its masking
        for row, qid in enumerate(query_ids[start:stop]):
            rel = [pos_of[d] for d, g in qrels.get(qid, {}).items() if g > 0 and d in pos_of]
            if rel:
                idx = torch.tensor(rel)
                pos.append(scores[row, idx].numpy())
                pos_q.append(np.full(len(rel), start + row))
                masked[row, idx] = -torch.inf
            # known positives are not negatives (paper 001); neither is the query's own id (BEIR convention)
            if ignore_identical_ids and qid in pos_of:
                masked[row, pos_of[qid]] = -torch.inf
        n_avail = (masked > -torch.inf).sum(dim=1)
        k = min(n_negatives, masked.shape[1])
        vals, _ = torch.topk(masked, k, dim=1)
        for row in range(stop - start):
            m = int(min(k, n_avail[row]))
            neg.append(vals[row, :m].numpy())
            neg_q.append(np.full(m, start + row))
    cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0)  # noqa: E731
    return AUCPools(cat(pos), cat(neg), cat(pos_q).astype(int), cat(neg_q).astype(int))


def _refuse_non_finite(
    values: Tensor, role: str, ids: Sequence[str], *, offset: int = 0, scores: bool = False
) -> None:
    """ValueError naming the first row of ``values`` (the embeddings of queries or documents, or a chunk of queries'
    scores) that holds NaN or inf, by index and id, and how many rows do. Read on, a NaN compares false with
    everything: the pools would look empty ("no negatives") or rank it arbitrarily."""
    finite = torch.isfinite(values.detach()).reshape(len(values), -1).all(dim=1)
    if bool(finite.all()):
        return
    bad = (~finite).nonzero().flatten()
    first = int(bad[0])
    label = f"{role} at index {offset + first} (id {ids[first]!r})"
    if scores:
        raise ValueError(
            f"pooled AUC: the scores of the {label} against the corpus hold NaN or inf ({len(bad)} of {len(values)} "
            "queries in this chunk do, with finite embeddings): the similarity overflows; check the similarity and "
            "the size of the embeddings"
        )
    raise ValueError(
        f"pooled AUC: the {role} embedding at index {offset + first} (id {ids[first]!r}) holds NaN or inf "
        f"({len(bad)} of {len(values)} {role}s do): check the model (a collapsed or diverged model) or leave the "
        "text out"
    )


def pooled_auc_score(positives: np.ndarray, negatives: np.ndarray) -> float:
    """Mann–Whitney AUC of positives vs negatives (ties ½); equals ``sklearn.metrics.roc_auc_score``. Scores must be
    finite (NaN compares false with everything: its AUC would be meaningless)."""
    positives, negatives = np.asarray(positives, dtype=np.float64), np.asarray(negatives, dtype=np.float64)
    for kind, scores in (("positive", positives), ("negative", negatives)):
        bad = int((~np.isfinite(scores)).sum())
        if bad:
            raise ValueError(f"AUC: {bad} of {len(scores)} {kind} scores are NaN or inf; every score must be finite.")
    n_p, n_n = len(positives), len(negatives)
    if n_p == 0 or n_n == 0:
        raise ValueError(f"AUC needs at least one positive and one negative score, got {n_p} and {n_n}.")
    ranks = rankdata(np.concatenate([positives, negatives]))  # average ranks for ties
    u = ranks[:n_p].sum() - n_p * (n_p + 1) / 2.0
    return float(u / (n_p * n_n))


def per_query_auc(pools: AUCPools) -> float:
    """Mean over queries (with ≥ 1 positive and ≥ 1 negative) of the per-query AUC — the shift-invariant control."""
    aucs = []
    for q in np.unique(pools.positive_query):
        p = pools.positives[pools.positive_query == q]
        n = pools.negatives[pools.negative_query == q]
        if len(p) and len(n):
            aucs.append(pooled_auc_score(p, n))
    if not aucs:
        raise ValueError("No query has both a positive and a negative score.")
    return float(np.mean(aucs))


def _append_csv(path: str, epoch: int, steps: int, metrics: dict[str, float]) -> None:
    keys = sorted(metrics)
    new = not os.path.isfile(path)
    with open(path, "a", encoding="utf-8") as f:
        if new:
            f.write(",".join(["epoch", "steps", *keys]) + "\n")
        f.write(",".join([str(epoch), str(steps), *(f"{metrics[k]:.6f}" for k in keys)]) + "\n")
