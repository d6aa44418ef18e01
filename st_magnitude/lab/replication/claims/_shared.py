"""Helpers several claim modules share: evaluation sets, comparisons over seeds, summaries."""

from __future__ import annotations

from typing import Any

import numpy as np

from st_magnitude.evaluation import stats
from st_magnitude.lab.replication.common import Context, auc_stat, beir_folder, load_eval_set, pooled_auc_statistic
from st_magnitude.lab.replication.pool_sizes import check_pool_sizes

__all__ = [
    "arm_summary",
    "compare_metric",
    "compare_auc",
    "eval_sets",
    "retrieval_profile",
]


def retrieval_profile(
    model: str,
    budget: dict[str, Any],
    *,
    learning_rate: float,
    training: dict[str, Any] | None = None,
    batch_size: int = 64,
    max_seq_length: int = 256,
    eval_queries: int | None = None,
    eval_corpus: int | None = None,
    **rest: Any,
) -> dict[str, Any]:
    """The settings of a retrieval fine-tune, in this order: ``model``, the ``budget`` (``{"steps": n}``, several
    named step counts, or a sweep and its steps), batch size, learning rate, the claim's other ``training`` settings,
    max_seq_length, the evaluation subsample (``None``: the full test split), then the claim's own ``rest``. The
    defaults are the gpu profiles' (batch 64, 256 tokens, full test splits)."""
    return dict(
        model=model,
        **budget,
        batch_size=batch_size,
        learning_rate=learning_rate,
        **(training or {}),
        max_seq_length=max_seq_length,
        eval_queries=eval_queries,
        eval_corpus=eval_corpus,
        **rest,
    )


def eval_sets(ctx: Context, names: tuple[str, ...]) -> list:
    s = ctx.settings
    return [
        load_eval_set(
            beir_folder(ctx, name),
            max_queries=s.get("eval_queries"),
            max_corpus=s.get("eval_corpus"),
            seed=0,  # fixed: the same queries and documents in every seed and arm (paired comparisons)
        )
        for name in names
    ]


def _per_seed(seeds: list[dict], arm: str, dataset: str, key: str) -> list:
    return [s["arms"][arm][dataset]["per_query"][key] for s in seeds]


def compare_metric(
    seeds: list[dict], arm_a: str, arm_b: str, dataset: str, metric: str = "ndcg@10", seed: int = 0
) -> stats.ArmComparison:
    return stats.compare_arms(
        _per_seed(seeds, arm_a, dataset, metric),
        _per_seed(seeds, arm_b, dataset, metric),
        metric=f"{metric} ({dataset})",
        arm_a=arm_a,
        arm_b=arm_b,
        seed=seed,
    )


def compare_auc(seeds: list[dict], arm_a: str, arm_b: str, dataset: str, n_boot: int = 1000) -> stats.ArmComparison:
    n = len(seeds[0]["arms"][arm_a][dataset]["per_query"]["ndcg@10"])  # every query, even one without pools
    check_pool_sizes(seeds)  # sizes that are not the scored pools' would move the interval silently
    pools_a = [pooled_auc_statistic(s["arms"][arm_a][dataset]["auc_pools"], n) for s in seeds]
    pools_b = [pooled_auc_statistic(s["arms"][arm_b][dataset]["auc_pools"], n) for s in seeds]
    return stats.compare_arms(
        pools_a,
        pools_b,
        statistic=auc_stat,
        metric=f"pooled_auc ({dataset})",
        arm_a=arm_a,
        arm_b=arm_b,
        n_boot=n_boot,
    )


def arm_summary(seeds: list[dict], metrics: tuple[str, ...] = ("ndcg@10", "pooled_auc")) -> dict[str, Any]:
    """Mean and t-interval over seeds of each arm's aggregate metrics: ``{arm: {dataset: {metric: interval}}}``."""
    out: dict[str, Any] = {}
    for arm, per_ds in seeds[0]["arms"].items():
        out[arm] = {}
        for ds in per_ds:
            out[arm][ds] = {}
            for m in per_ds[ds]["metrics"]:
                if metrics and m not in metrics and not m.startswith("ndcg@10_"):
                    continue
                vals = [s["arms"][arm][ds]["metrics"][m] for s in seeds]
                if all(np.isfinite(vals)):
                    out[arm][ds][m] = stats.seed_interval(vals).to_dict()
    return out
