"""The pooled-AUC bootstrap statistic from query × query pair counts equals ranking the concatenated pools of the
resampled queries (the reference: :func:`st_magnitude.evaluation.pooled_auc_score`, itself equal to sklearn)."""

from __future__ import annotations

import numpy as np

from st_magnitude.evaluation import pooled_auc_score
from st_magnitude.replication.common import QueryPools, auc_stat


def test_pair_count_auc_equals_the_concatenated_pools_with_ties_and_empty_queries():
    rng = np.random.default_rng(0)
    for trial in range(20):
        n = int(rng.integers(2, 15))
        pools = QueryPools(
            [np.round(rng.normal(1, 1, rng.integers(0, 4)), 1) for _ in range(n)],  # rounded: ties; 0: empty
            [np.round(rng.normal(0, 1, rng.integers(0, 9)), 1) for _ in range(n)],
        )
        for _ in range(5):
            idx = rng.integers(0, n, n)
            pos = np.concatenate([pools.positives[i] for i in idx])
            neg = np.concatenate([pools.negatives[i] for i in idx])
            if len(pos) == 0 or len(neg) == 0:
                assert np.isnan(auc_stat(pools, idx))
            else:
                assert np.isclose(auc_stat(pools, idx), pooled_auc_score(pos, neg), rtol=0, atol=1e-12), trial
