"""Pooled ROC-AUC over queries (paper 001 §5.1, "Optimizing What Matters") with a ROC-curve PNG.

Protocol (paper 001 §5.1): for each query, the scores of *all* its positive passages are
positive samples, and the scores of its 500 highest-scoring non-positive passages (exhaustive search over the
corpus) are negative samples; positives and negatives of all queries are pooled and **one** AUC is computed::

    AUC = 1/(|P|·|N|) Σ_{a∈P} Σ_{b∈N} [1(a > b) + ½·1(a = b)]

computed here through ranks (Mann–Whitney U, ties get ½, i.e. what ``sklearn.metrics.roc_auc_score`` gives).
As a control we also report the mean of per-query AUCs (our choice): it is invariant to a per-query
score shift, pooled AUC is not — the gap measures cross-query calibration, which only the query magnitude of a
magnitude-aware similarity (qnorm vs dot, dnorm vs cosine) can change.

Choices where the paper is silent (docs/evaluation.md): relevant = grade > 0; ties count ½; exact search; a
document whose id equals the query id is not a negative (BEIR convention, ``ignore_identical_ids``).
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np
from torch import Tensor

from st_magnitude.evaluation._retrieval import (  # the pooled-AUC math lives below ir (no ir <-> auc cycle)
    AUCPools,
    ScoreFn,
    per_query_auc,
    pooled_auc_pools,
    pooled_auc_score,
    resolve_score_fn,
)
from st_magnitude.evaluation.ir import RoleIREvaluator
from st_magnitude.similarity import Similarity

logger = logging.getLogger(__name__)

__all__ = ["AUCPools", "PooledAUCEvaluator", "per_query_auc", "plot_roc", "pooled_auc_pools", "pooled_auc_score"]


def plot_roc(curves: dict[str, AUCPools], path: str | os.PathLike, title: str = "Pooled ROC (paper 001 §5.1)") -> str:
    """Write a PNG with the pooled ROC curve(s) and the score histograms of positives vs negatives."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.metrics import roc_curve

    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), layout="constrained")
    for label, pools in curves.items():
        y = np.r_[np.ones(len(pools.positives)), np.zeros(len(pools.negatives))]
        s = np.r_[pools.positives, pools.negatives]
        fpr, tpr, _ = roc_curve(y, s)
        auc = pooled_auc_score(pools.positives, pools.negatives)
        axes[0].plot(fpr, tpr, label=f"{label} (AUC {auc:.3f})")
    axes[0].plot([0, 1], [0, 1], color="grey", lw=0.8, ls="--")
    axes[0].set(xlabel="false positive rate", ylabel="true positive rate", title=title)
    axes[0].legend(loc="lower right", fontsize=8)
    first = next(iter(curves.values()))
    bins = np.histogram_bin_edges(np.r_[first.positives, first.negatives], bins=50)
    axes[1].hist(first.negatives, bins=bins, alpha=0.6, density=True, label="top-k negatives")
    axes[1].hist(first.positives, bins=bins, alpha=0.6, density=True, label="positives")
    axes[1].set(xlabel="score", ylabel="density", title=f"pooled scores: {next(iter(curves))}")
    axes[1].legend(fontsize=8)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


class PooledAUCEvaluator(RoleIREvaluator):
    """Pooled ROC-AUC over queries (paper 001 §5.1) as a ``SentenceEvaluator``, with a ROC curve PNG.

    Encodes with the model's roles (``encode_query`` / ``encode_document``), scores with the model's own similarity
    (or ``similarity``), pools every query's positives and its ``n_negatives`` hardest non-positives, and reports
    ``pooled_auc`` (primary) and ``per_query_auc`` (the shift-invariant control). When called with an
    ``output_path`` (as the Trainer does) it appends a CSV row and writes ``roc_<name>.png``.

    Args:
        queries, corpus, relevant_docs: as :class:`RoleIREvaluator`.
        n_negatives: hard negatives per query (paper: 500).
        similarity: ``None`` for the model's own similarity, or a name / Similarity / callable.
        ignore_identical_ids: a document with the query's id is never a negative (BEIR convention).
        write_png: write the ROC PNG when an ``output_path`` is given.
        batch_size, name, show_progress_bar: as usual.

    Example::

        evaluator = PooledAUCEvaluator(queries, corpus, qrels, name="scifact")
        evaluator(model, output_path="runs/auc")   # {"scifact_pooled_auc": ..., "scifact_per_query_auc": ...}
    """

    def __init__(
        self,
        queries: dict[str, str],
        corpus: dict[str, Any],
        relevant_docs: dict[str, Any],
        *,
        n_negatives: int = 500,
        similarity: str | Similarity | ScoreFn | None = None,
        ignore_identical_ids: bool = True,
        write_png: bool = True,
        batch_size: int = 32,
        name: str = "",
        show_progress_bar: bool = False,
    ) -> None:
        super().__init__(
            queries,
            corpus,
            relevant_docs,
            ndcg_at_k=(),
            recall_at_k=(),
            mrr_at_k=(),
            similarity=similarity,
            ignore_identical_ids=ignore_identical_ids,
            batch_size=batch_size,
            name=name,
            show_progress_bar=show_progress_bar,
        )
        if n_negatives <= 0:
            raise ValueError(f"n_negatives must be a positive integer, got {n_negatives}")
        self.n_negatives = n_negatives
        self.write_png = write_png
        self.primary_metric = "pooled_auc"
        self.last_pools: AUCPools | None = None

    def evaluate_embeddings(self, query_embeddings: Tensor, corpus_embeddings: Tensor, score_fn: ScoreFn) -> dict:
        pools, metrics = self._pooled_auc(query_embeddings, corpus_embeddings, score_fn, self.n_negatives)
        self.last_pools = pools
        return {
            **metrics,
            "n_positives": float(len(pools.positives)),
            "n_negatives": float(len(pools.negatives)),
        }

    def __call__(self, model, output_path: str | None = None, epoch: int = -1, steps: int = -1) -> dict[str, float]:
        score_fn, desc = resolve_score_fn(model, self.similarity)
        logger.info("PooledAUCEvaluator %s: scoring with %s", self.name or "", desc)
        q, d = self.encode(model)
        metrics = self.evaluate_embeddings(q, d, score_fn)
        tag = self.name or "eval"
        if output_path is not None and self.write_png:
            os.makedirs(output_path, exist_ok=True)
            suffix = "" if epoch == -1 and steps == -1 else f"_e{epoch}_s{steps}"
            plot_roc({tag: self.last_pools}, os.path.join(output_path, f"roc_{tag}{suffix}.png"))
        return self._report(model, metrics, output_path, f"pooled_auc_{tag}.csv", epoch, steps)

    def get_config_dict(self) -> dict[str, Any]:
        return {**super().get_config_dict(), "n_negatives": self.n_negatives}
