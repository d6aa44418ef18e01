"""Cross-evaluation matrix (paper 000 §4.2, Fig. 3): train similarity × evaluation similarity.

Each model (one per *training* similarity) is encoded once, raw (every normalisation removed, so the evaluation
similarity decides what magnitude is used), with its query/document roles; its embeddings are then scored with each
*evaluation* similarity from :mod:`st_magnitude.similarity`. By Prop. 4.1 (ranking equivalence) the qnorm column
equals the dot column and the dnorm column equals the cosine column — a built-in consistency check.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from torch import Tensor

from st_magnitude.data.beir import BEIRData, doc_text
from st_magnitude.evaluation.ir import encode_roles, exact_search, retrieval_metrics
from st_magnitude.model.load import raw_model
from st_magnitude.similarity import get_similarity, similarity_names

logger = logging.getLogger(__name__)

__all__ = ["EVAL_SIMILARITIES", "cross_evaluation", "cross_evaluation_from_embeddings", "format_matrix"]

EVAL_SIMILARITIES = similarity_names(fixed_gammas=True)  # cosine, dot, qnorm, dnorm


def cross_evaluation_from_embeddings(
    embeddings: dict[str, tuple[Tensor, Tensor]],
    data: BEIRData,
    eval_similarities: Sequence[str] = EVAL_SIMILARITIES,
    metric: str = "ndcg@10",
) -> dict[str, dict[str, float]]:
    """``{train_name: {eval_similarity: metric}}`` from raw (query, corpus) embeddings in ``data`` order."""
    for s in eval_similarities:
        if s not in EVAL_SIMILARITIES:
            raise ValueError(f"evaluation similarities must be among {EVAL_SIMILARITIES}, got {s!r}")
    k = int(metric.split("@")[1]) if "@" in metric else 10
    kind = metric.split("@")[0]
    allowed = ("ndcg", "recall", "mrr")
    if kind not in allowed:
        raise ValueError(f"metric must be one of {[f'{a}@k' for a in allowed]}, got {metric!r}")
    qids, cids = list(data.queries), list(data.corpus)
    out: dict[str, dict[str, float]] = {}
    for train, (q, d) in embeddings.items():
        row = {}
        for s in eval_similarities:
            res = exact_search(q, d, qids, cids, top_k=max(k, 10), score_fn=get_similarity(s))
            m = retrieval_metrics(
                data.qrels,
                res,
                ndcg_at_k=(k,) if kind == "ndcg" else (),
                recall_at_k=(k,) if kind == "recall" else (),
                mrr_at_k=(k,) if kind == "mrr" else (),
            )
            row[s] = m[metric]
        out[train] = row
    return out


def cross_evaluation(
    models: dict[str, object],
    data: BEIRData,
    eval_similarities: Sequence[str] = EVAL_SIMILARITIES,
    metric: str = "ndcg@10",
    batch_size: int = 32,
) -> dict[str, dict[str, float]]:
    """Encode each model raw with its roles, then score with every evaluation similarity (see module docs)."""
    if not models:
        raise ValueError("cross_evaluation needs at least one model: {train_similarity_name: model}")
    qids, cids = list(data.queries), list(data.corpus)
    emb = {}
    for name, model in models.items():
        raw = raw_model(model)
        emb[name] = encode_roles(
            raw, [data.queries[i] for i in qids], [doc_text(data.corpus[i]) for i in cids], batch_size=batch_size
        )
    return cross_evaluation_from_embeddings(emb, data, eval_similarities, metric)


def format_matrix(matrix: dict[str, dict[str, float]], metric: str = "nDCG@10") -> str:
    """Markdown table: rows = train similarity, columns = evaluation similarity."""
    cols = list(next(iter(matrix.values())))
    lines = [f"| train \\ eval ({metric}) | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for train, row in matrix.items():
        lines.append(f"| {train} | " + " | ".join(f"{row[c]:.4f}" for c in cols) + " |")
    return "\n".join(lines)
