"""Synthetic per-seed results in the shape each claim's ``run_seed`` returns, for testing the verdict rules and gates
without training: per-query scores drawn from a known model, so the truth of the claim is fixed by construction."""

from __future__ import annotations

import numpy as np


def ir_arm(per_query: dict[str, np.ndarray], pools: dict | None = None, **metrics: float) -> dict:
    """One arm on one dataset: per-query metrics (and their means), optional pooled-AUC pools."""
    out = {
        "metrics": {**{m: float(np.mean(v)) for m, v in per_query.items()}, **metrics},
        "per_query": {m: np.asarray(v, dtype=float).tolist() for m, v in per_query.items()},
    }
    if pools is not None:
        out["auc_pools"] = pools
        out["metrics"]["pooled_auc"] = 0.5
    return out


def scores(rng: np.random.Generator, n: int, mean: float, sd: float = 0.05, base: np.ndarray | None = None):
    """Per-query scores in [0, 1]: a shared per-query difficulty ``base`` (if given) + ``mean`` + noise."""
    v = (base if base is not None else 0.0) + mean + rng.normal(0, sd, n)
    return np.clip(v, 0.0, 1.0)


def auc_pools(rng: np.random.Generator, n_queries: int, shift: float, n_pos: int = 3, n_neg: int = 20) -> dict:
    """Pools whose positives sit ``shift`` above the negatives on average (pooled AUC grows with ``shift``)."""
    pos, neg, pq, nq = [], [], [], []
    for q in range(n_queries):
        offset = rng.normal(0, 0.3)  # a per-query score offset: pooled AUC is hurt by it, per-query AUC is not
        pos += (offset + shift + rng.normal(0, 0.2, n_pos)).tolist()
        neg += (offset + rng.normal(0, 0.2, n_neg)).tolist()
        pq += [q] * n_pos
        nq += [q] * n_neg
    return {"positives": pos, "negatives": neg, "positive_query": pq, "negative_query": nq}


def rising(n: int, step: int = 50) -> list[dict]:
    """A dev history still improving at its last evaluation (training not converged)."""
    return [{"step": i * step, "dev": 0.1 + 0.02 * i} for i in range(n)]


def peaked(n: int, step: int = 50) -> list[dict]:
    """A dev history whose best came before the end (early stopping would stop there)."""
    return [{"step": i * step, "dev": 0.3 - 0.01 * abs(i - n // 2)} for i in range(n)]
