"""Fast bootstrap statistics of the claims against their references: the pooled AUC from query × query pair counts
equals ranking the concatenated pools of the resampled queries (:func:`st_magnitude.evaluation.pooled_auc_score`,
itself equal to sklearn); the table-5 bootstrap's ranks and Spearman equal scipy's."""

from __future__ import annotations

import numpy as np
import pytest

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


@pytest.mark.filterwarnings("ignore:An input array is constant")  # a constant resample: NaN on both sides
def test_table5_bootstrap_statistic_is_scipy_spearman_of_the_resample():
    """The bootstrap's ranks of ``x[idx]`` (no sort per resample) are scipy's average ranks of ``x[idx]``, and the
    statistic on them is scipy's Spearman of the resampled pairs, for resamples with repeats, delete-one index sets
    and values with ties; a NaN has no rank and is refused, naming what holds it."""
    from scipy.stats import rankdata, spearmanr

    from st_magnitude.lab.replication.claims.c000_table5 import _pearson, _ResampleRanks

    rng = np.random.default_rng(3)
    for _ in range(30):
        n = int(rng.integers(3, 40))
        x, y = (np.round(rng.normal(size=n), int(rng.integers(0, 2))) for _ in range(2))  # 0/1 decimals: ties
        rx, ry = _ResampleRanks(x, "x"), _ResampleRanks(y, "y")
        for idx in (rng.integers(0, n, n), np.delete(np.arange(n), rng.integers(0, n)), np.arange(n)):
            assert np.array_equal(rx(idx), rankdata(x[idx]))
            ours, want = _pearson(rx(idx), ry(idx)), spearmanr(x[idx], y[idx]).statistic
            assert np.isclose(ours, want, rtol=0, atol=1e-12, equal_nan=True)  # NaN both: a constant resample
    with pytest.raises(ValueError, match="dot predictions: 1 of 3 values are NaN or inf"):
        _ResampleRanks([0.1, float("nan"), 0.3], "dot predictions")


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
