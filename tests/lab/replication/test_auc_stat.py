"""Fast bootstrap statistics of the claims against their references: the pooled AUC from query × query pair counts
equals ranking the concatenated pools of the resampled queries (:func:`st_magnitude.evaluation.pooled_auc_score`,
itself equal to sklearn); the table-5 Spearman and its resample ranks equal scipy's."""

from __future__ import annotations

import numpy as np

from st_magnitude.evaluation.auc import pooled_auc_score
from st_magnitude.lab.replication.common import QueryPools, auc_stat


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


def test_table5_spearman_equals_scipy_with_ties():
    from scipy.stats import spearmanr

    from st_magnitude.lab.replication.claims.c000_table5 import spearman

    rng = np.random.default_rng(1)
    for _ in range(10):
        a, b = np.round(rng.normal(size=50), 1), np.round(rng.normal(size=50), 1)
        assert np.isclose(spearman(a, b), spearmanr(a, b).statistic, rtol=0, atol=1e-12)


def test_table5_resample_ranks_equal_scipy_rankdata_of_the_resample():
    """The bootstrap's ranks of ``x[idx]`` (no sort per resample) are scipy's average ranks of ``x[idx]``, for
    resamples with repeats, delete-one index sets and values with ties."""
    from scipy.stats import rankdata

    from st_magnitude.lab.replication.claims.c000_table5 import _ResampleRanks

    rng = np.random.default_rng(3)
    for _ in range(30):
        n = int(rng.integers(2, 40))
        x = np.round(rng.normal(size=n), int(rng.integers(0, 2)))  # 0 or 1 decimals: many ties
        ranks = _ResampleRanks(x)
        for idx in (rng.integers(0, n, n), np.delete(np.arange(n), rng.integers(0, n)), np.arange(n)):
            assert np.array_equal(ranks(idx), rankdata(x[idx]))


def test_compact_pools_give_the_same_bootstrap_statistic():
    from st_magnitude.lab.replication.common import compact_pools, pooled_auc_statistic

    rng = np.random.default_rng(2)
    n = 12
    pq = np.repeat(np.arange(n), 3)
    nq = np.repeat(np.arange(n), 7)
    stored = {  # rounded: ties give half counts
        "positives": np.round(rng.normal(1, 1, len(pq)), 1).tolist(),
        "negatives": np.round(rng.normal(0, 1, len(nq)), 1).tolist(),
        "positive_query": pq.tolist(),
        "negative_query": nq.tolist(),
    }
    flat, compact = pooled_auc_statistic(stored, n), pooled_auc_statistic(compact_pools(stored, n), n)
    assert len(compact) == n
    assert np.array_equal(compact.pair_counts(), flat.pair_counts())  # exact, not close: counts are stored whole
    for _ in range(10):
        idx = rng.integers(0, n, n)
        assert auc_stat(compact, idx) == auc_stat(flat, idx)


def test_raw_pools_with_a_query_outside_the_scored_ones_or_a_bad_score_are_refused():
    import pytest

    from st_magnitude.lab.replication.common import pooled_auc_statistic

    good = {"positives": [0.5, 0.2], "negatives": [0.1, 0.3], "positive_query": [0, 1], "negative_query": [0, 1]}
    assert len(pooled_auc_statistic(good, 2)) == 2
    bad = {
        "a query past the scored ones would be dropped": ({"negative_query": [0, 2]}, r"negative_query must lie in"),
        "a negative query index": ({"positive_query": [-1, 1]}, r"positive_query must lie in \[0, 2\)"),
        "a NaN score": ({"positives": [float("nan"), 0.2]}, r"every positive score must be a finite number"),
        "lengths that differ": ({"negatives": [0.1]}, r"negatives and negative_query must be lists of one length"),
    }
    for why, (change, message) in bad.items():
        with pytest.raises(ValueError, match=message):
            pooled_auc_statistic({**good, **change}, 2)
            pytest.fail(why)
