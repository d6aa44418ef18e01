"""The sizes a stored pooled-AUC pool records, checked against what the run computed from the same pools.

The stored (compact) pool of a query set is its query × query pair counts and each query's numbers of positives and
negatives (``n_pos``, ``n_neg``; :func:`~st_magnitude.lab.replication.common.compact_pools`). The pair counts only
bound the sizes from below (``C[i, j] ≤ P_i · N_j``), so a size raised by hand (an ``n_neg`` of 2⁷⁰) passed every value
check and moved the bootstrap interval of the pooled AUC without a word. Two facts the run recorded fix them:

* every query kept at most ``settings.auc_negatives`` negatives (its top non-positives);
* the run computed ``metrics.pooled_auc`` from the very pools it stored, so ``ΣC / (ΣP · ΣN)`` must give it again
  (exactly on every committed result; compared here to 1e-9).

:func:`check_pool_sizes` refuses, naming the seed, arm, dataset and key, a pool that breaks either. Sizes moved
between queries with both totals kept and every count under the cap are not caught: only the data set's qrels could
tell (``docs/safety.md``, "Left as it is").
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from st_magnitude.lab.replication.common import COMPACT_POOLS, pooled_auc_statistic

__all__ = ["check_pool_sizes"]


def _with_pools(obj: Any, where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(path, record)`` for every record under ``obj`` that holds a compact ``auc_pools``."""
    if isinstance(obj, dict):
        pools = obj.get("auc_pools")
        if isinstance(pools, dict) and pools.get("format") == COMPACT_POOLS:
            yield where, obj
        for key, value in obj.items():
            if key != "auc_pools":
                yield from _with_pools(value, f"{where}.{key}")


def check_pool_sizes(seeds: list[dict[str, Any]], auc_negatives: Any = None) -> None:
    """``ValueError`` naming the place for the first compact pool under ``seeds`` whose sizes are not those of the
    pools the run scored: a query with more negatives than ``auc_negatives`` (the run's setting, when an integer),
    or sizes and counts that do not give the ``metrics.pooled_auc`` recorded beside them (module docstring)."""
    cap = auc_negatives if isinstance(auc_negatives, int) and not isinstance(auc_negatives, bool) else None
    for seed in seeds:
        for where, record in _with_pools(seed, f"seed {seed.get('seed')}"):
            pools = record["auc_pools"]
            try:
                grouped = pooled_auc_statistic(pools)  # the value checks: types, shapes, C ≤ P·N
            except ValueError as exc:
                raise ValueError(f"{where}: {exc}") from None
            n_pos, n_neg = grouped._sizes
            if cap is not None and n_neg.size and n_neg.max() > cap:
                j = int(n_neg.argmax())
                raise ValueError(
                    f"{where}.auc_pools.n_neg[{j}]: is {pools['n_neg'][j]}, more than the {cap} negatives the run "
                    "kept per query (settings.auc_negatives)"
                )
            metrics = record.get("metrics")
            recorded = metrics.get("pooled_auc") if isinstance(metrics, dict) else None
            if isinstance(recorded, bool) or not isinstance(recorded, (int, float)) or not math.isfinite(recorded):
                raise ValueError(
                    f"{where}.metrics.pooled_auc: is {recorded!r}; the run records the pooled AUC beside its pools, "
                    "and the pools' sizes are checked against it"
                )
            total = float(n_pos.sum()) * float(n_neg.sum())
            auc = float(grouped.pair_counts().sum()) / total if total > 0 else math.nan
            if not math.isclose(auc, recorded, rel_tol=1e-9, abs_tol=1e-12):
                raise ValueError(
                    f"{where}.auc_pools: its pair counts and sizes (n_pos, n_neg) give a pooled AUC of {auc:.10g}, "
                    f"not the {recorded:.10g} the run computed from the same pools (metrics.pooled_auc): a size or "
                    "count was changed after the run"
                )
