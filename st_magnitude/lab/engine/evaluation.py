"""Evaluation in the lab: compare's table rows (:func:`evaluate_sets`, through
:func:`st_magnitude.evaluation.runner.evaluate_model`) and replicate's per-item scores (:func:`evaluate_retrieval`:
per-query nDCG@10 / Recall@1 / Recall@100 and the pooled-AUC pools the paired bootstrap resamples). Both rank with
:func:`st_magnitude.evaluation.exact_search` semantics and score per query with pytrec_eval
(:func:`st_magnitude.evaluation.ir.per_query_metrics`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from st_magnitude.data.eval_set import EvalSet

__all__ = ["evaluate_retrieval", "evaluate_sets", "per_query_ndcg"]


def evaluate_sets(model, eval_sets: list[EvalSet], batch_size: int = 64) -> tuple[dict[str, dict], dict[str, dict]]:
    """``(metrics, norms)`` per dataset: :func:`st_magnitude.evaluation.runner.evaluate_model` with the model's
    own similarity, plus what the comparison records — per-query nDCG@10 (``PER_QUERY_KEY``), the dual cosine/dot
    view of the raw embeddings and their norms (for the histograms)."""
    from st_magnitude.evaluation.runner import evaluate_model

    metrics, norms = {}, {}
    for es in eval_sets:
        row = evaluate_model(
            model,
            es.data,
            batch_size=batch_size,
            show_progress_bar=True,
            per_query=True,
            raw_views=("cosine", "dot"),
            norms=True,
        )
        norms[es.name] = row.pop("norms")
        metrics[es.name] = {k: v for k, v in row.items() if k not in _ROW_INFO}
    return metrics, norms


#: What :func:`~st_magnitude.evaluation.runner.evaluate_model`'s row says about the data, not a metric.
_ROW_INFO = ("dataset", "split", "queries", "corpus", "note", "scored_with", "seconds")


# ------------------------------------------------------------------------------------------------------------------
# evaluation with per-item scores
# ------------------------------------------------------------------------------------------------------------------
def per_query_ndcg(
    qrels: dict[str, dict[str, int]], results: dict[str, dict[str, float]], k: int = 10
) -> dict[str, float]:
    """Per-query nDCG@k, recall@1 and recall@100 (:func:`st_magnitude.evaluation.ir.per_query_metrics`)."""
    from st_magnitude.evaluation.ir import per_query_metrics

    return per_query_metrics(qrels, results, k)


def evaluate_retrieval(
    model,
    es: EvalSet,
    *,
    similarity: str | None = None,
    auc_negatives: int = 100,
    batch_size: int = 64,
    dual: bool = False,
    embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> dict[str, Any]:
    """Metrics and per-query scores of ``model`` on ``es``.

    ``similarity=None`` scores with the model's own outputs and a dot product (a model converted by
    ``apply_similarity`` emits φ_γ per role, so this *is* its similarity; for a plain model pass its name).
    ``dual=True`` also scores the same embeddings with plain dot and cosine (the App. N.3 view).
    ``embeddings``: precomputed ``(queries, documents)`` from :func:`st_magnitude.evaluation.encode_roles`.
    Returns ``{"metrics": {...}, "per_query": {metric: [score per query id]}, "auc_pools": {...}}``.
    """
    from st_magnitude import get_similarity
    from st_magnitude.evaluation import encode_roles, exact_search
    from st_magnitude.evaluation.auc import pooled_auc_pools, pooled_auc_score

    q, d = embeddings if embeddings is not None else encode_roles(model, es.queries, es.docs, batch_size=batch_size)
    score_fn = get_similarity(similarity) if similarity else None
    results = exact_search(q, d, es.query_ids, es.doc_ids, top_k=100, score_fn=score_fn)
    pq = per_query_ndcg(es.qrels, results)
    per_query = {m: [pq[qid][m] for qid in es.query_ids] for m in ("ndcg@10", "recall@1", "recall@100")}
    pools = pooled_auc_pools(q, d, es.query_ids, es.doc_ids, es.qrels, score_fn=score_fn, n_negatives=auc_negatives)
    metrics = {m: float(np.mean(v)) for m, v in per_query.items()}
    metrics["pooled_auc"] = pooled_auc_score(pools.positives, pools.negatives)
    out = {
        "metrics": metrics,
        "per_query": per_query,
        "auc_pools": {
            "positives": pools.positives.tolist(),
            "negatives": pools.negatives.tolist(),
            "positive_query": pools.positive_query.tolist(),
            "negative_query": pools.negative_query.tolist(),
        },
    }
    if dual:
        for label in ("dot", "cosine"):
            r = exact_search(q, d, es.query_ids, es.doc_ids, top_k=10, score_fn=get_similarity(label))
            scores = per_query_ndcg(es.qrels, r)
            out["per_query"][f"ndcg@10_{label}"] = [scores[qid]["ndcg@10"] for qid in es.query_ids]
            metrics[f"ndcg@10_{label}"] = float(np.mean(out["per_query"][f"ndcg@10_{label}"]))
        metrics["dot_minus_cosine"] = metrics["ndcg@10_dot"] - metrics["ndcg@10_cosine"]
    norms = d.norm(dim=-1)
    metrics["doc_norm_mean"], metrics["doc_norm_cv"] = float(norms.mean()), float(norms.std() / norms.mean())
    return out
