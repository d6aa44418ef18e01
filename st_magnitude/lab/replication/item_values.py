"""The range of every per-item value a result file holds (per-query metrics, STS predictions and labels, pooled-AUC
pools, training histories): checked when a ``.items.json.gz`` file is read, so a value outside its range or a string
standing for a number is refused by name instead of recomputing an interval from it."""

from __future__ import annotations

import math
from typing import Any

from st_magnitude._trust.json_files import _kind
from st_magnitude._trust.numbers import check_number, check_numbers

__all__ = ["check_item_values", "metric_range"]

#: per-query metrics (by the start of their name) that are fractions: nDCG, recall, MRR, MAP, precision, AUC
UNIT_METRICS = ("ndcg", "recall", "mrr", "map", "precision", "auc")
#: per-query metrics that are non-negative without an upper bound
NON_NEGATIVE_METRICS = ("contrastive_entropy",)
#: the raw pooled-AUC pools (the compact form is checked by ``pooled_auc_statistic``)
POOL_SCORES = ("positives", "negatives")
POOL_QUERIES = ("positive_query", "negative_query")


def metric_range(name: str) -> tuple[float, float]:
    """``(low, high)`` of a per-query metric: ``[0, 1]`` for a fraction, ``[0, inf)`` for an entropy, any finite
    number for a metric not listed here."""
    if name.lower().startswith(UNIT_METRICS):
        return 0.0, 1.0
    if name in NON_NEGATIVE_METRICS:
        return 0.0, math.inf
    return -math.inf, math.inf


def _per_query(value: Any, where: str) -> None:
    if not isinstance(value, dict):
        raise ValueError(f"{where}: must be an object of lists (one per metric), not {_kind(value)}")
    for name, scores in value.items():
        low, high = metric_range(name)
        check_numbers(scores, f"{where}.{name}", low=low, high=high)


def _pools(value: Any, where: str) -> None:
    if not isinstance(value, dict) or "format" in value:
        return  # the compact form, or not an object: pooled_auc_statistic names it
    missing = [k for k in (*POOL_SCORES, *POOL_QUERIES) if k not in value]
    if missing:
        raise ValueError(
            f"{where}: misses {', '.join(missing)} (raw pools hold {', '.join(POOL_SCORES + POOL_QUERIES)})"
        )
    for key in POOL_SCORES:
        check_numbers(value[key], f"{where}.{key}")
    for key in POOL_QUERIES:
        check_numbers(value[key], f"{where}.{key}", low=0, integer=True)


def _history(value: Any, where: str) -> None:
    if not isinstance(value, dict):
        raise ValueError(f"{where}: must be an object of lists (one per arm), not {_kind(value)}")
    for arm, rows in value.items():
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise ValueError(f"{where}.{arm}: must be a list of objects (one per evaluation), not {_kind(rows)}")
        for i, row in enumerate(rows):
            for key, v in row.items():
                step = key == "step"
                check_number(v, f"{where}.{arm}[{i}].{key}", low=0 if step else -math.inf, integer=step)


CHECKS = {
    "per_query": _per_query,
    "auc_pools": _pools,
    "predictions": check_numbers,
    "labels": check_numbers,
    "history": _history,
}


def check_item_values(obj: Any, where: str = "") -> None:
    """``ValueError`` naming the key and item (``arms.mw.scifact.per_query.ndcg@10[3]: is 1000000.0, outside
    [0, 1]``) for the first per-item value under ``obj`` that is no number or lies outside its range."""
    if not isinstance(obj, dict):
        return
    for key, value in obj.items():
        path = f"{where}.{key}" if where else str(key)
        if key in CHECKS:
            CHECKS[key](value, path)
        else:
            check_item_values(value, path)
