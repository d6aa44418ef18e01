"""Statistics of st-magnitude replicate: interval coverage on synthetic data with a known difference, verdict rules."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from st_magnitude.evaluation.stats import (
    compare_arms,
    crossed_interval,
    paired_bootstrap,
    paired_bootstrap_fn,
    seed_interval,
)
from st_magnitude.evaluation.verdicts import combine_verdicts, verdict


def _paired(rng, n, delta, noise=0.3):
    base = rng.uniform(0, 1, n)  # per-query difficulty, shared by both arms
    return base + delta + rng.normal(0, noise, n), base + rng.normal(0, noise, n)


def test_paired_bootstrap_covers_the_true_difference_about_95_percent():
    rng = np.random.default_rng(0)
    delta, hits, reps = 0.1, 0, 300
    for r in range(reps):
        a, b = _paired(rng, 80, delta)
        ci = paired_bootstrap(a, b, n_boot=400, seed=r)
        hits += ci.low <= delta <= ci.high
    assert 0.89 <= hits / reps <= 0.99, hits / reps


def test_seed_t_interval_covers_the_true_mean_95_percent():
    rng = np.random.default_rng(1)
    hits, reps = 0, 3000
    for _ in range(reps):
        ci = seed_interval(rng.normal(0.05, 0.02, 3))
        hits += ci.low <= 0.05 <= ci.high
    assert 0.935 <= hits / reps <= 0.965, hits / reps


def test_seed_interval_matches_scipy_and_is_undefined_for_one_seed():
    v = [0.31, 0.35, 0.30, 0.36]
    ci = seed_interval(v)
    lo, hi = sps.t.interval(0.95, len(v) - 1, loc=np.mean(v), scale=sps.sem(v))
    assert ci.low == pytest.approx(lo) and ci.high == pytest.approx(hi)
    one = seed_interval([0.3])
    assert one.estimate == 0.3 and math.isinf(one.low) and math.isinf(one.high) and not one.excludes_zero


def test_compare_arms_detects_a_real_difference_and_not_noise():
    rng = np.random.default_rng(2)
    seeds_a, seeds_b = zip(*[_paired(rng, 100, 0.15) for _ in range(3)])
    c = compare_arms(seeds_a, seeds_b, metric="m", arm_a="x", arm_b="y", n_boot=500)
    assert c.significant and c.diff == pytest.approx(0.15, abs=0.06)
    judged = crossed_interval(np.stack([np.asarray(a) - np.asarray(b) for a, b in zip(seeds_a, seeds_b)]))
    assert (c.ci.low, c.ci.high) == pytest.approx((judged.low, judged.high))  # the seed × item interval is judged
    false_pos = 0
    for r in range(60):
        sa, sb = zip(*[_paired(rng, 60, 0.0) for _ in range(3)])
        false_pos += compare_arms(sa, sb, n_boot=200, seed=r).significant
    assert false_pos / 60 <= 0.1


def test_compare_arms_with_a_statistic_equals_the_mean_path_for_means():
    rng = np.random.default_rng(3)
    sa, sb = zip(*[_paired(rng, 50, 0.05) for _ in range(2)])
    plain = compare_arms(sa, sb, n_boot=300)
    fn = compare_arms(sa, sb, statistic=lambda v, idx: float(np.mean(np.asarray(v)[idx])), n_boot=300)
    assert fn.diff == pytest.approx(plain.diff)
    assert fn.per_seed_diff == pytest.approx(plain.per_seed_diff)
    assert fn.across_seeds.low == pytest.approx(plain.across_seeds.low)


def test_paired_bootstrap_fn_spearman():
    rng = np.random.default_rng(4)
    labels = rng.uniform(0, 1, 200)
    good, bad = labels + rng.normal(0, 0.1, 200), labels + rng.normal(0, 1.0, 200)

    def rho(x, idx):
        return sps.spearmanr(x[idx], labels[idx]).statistic

    ci = paired_bootstrap_fn(lambda idx: rho(good, idx) - rho(bad, idx), 200, n_boot=300)
    assert ci.excludes_zero and ci.estimate == pytest.approx(rho(good, np.arange(200)) - rho(bad, np.arange(200)))


def test_one_seed_uses_a_t_interval_over_items_and_says_seed_noise_is_not_covered():
    rng = np.random.default_rng(5)
    a, b = _paired(rng, 80, 0.2)
    c = compare_arms([a], [b], n_boot=300)
    lo, hi = sps.t.interval(0.95, 79, loc=np.mean(a - b), scale=sps.sem(a - b))
    assert c.n_seeds == 1 and "1 seed" in c.ci.method
    # the t interval over items, each end widened (never narrowed) where the bootstrap-t's tail is longer
    assert c.ci.low <= lo + 1e-12 and c.ci.high >= hi - 1e-12
    assert c.ci.high - c.ci.low <= 1.5 * (hi - lo)
    assert not c.components.seed_noise_covered


@pytest.mark.parametrize(
    ("low", "high", "expect", "threshold", "label"),
    [
        (0.01, 0.05, "greater", 0.0, "reproduces"),
        (-0.05, -0.01, "greater", 0.0, "contradicts"),
        (-0.01, 0.05, "greater", 0.0, "inconclusive"),
        (-0.05, -0.01, "less", 0.0, "reproduces"),
        (-0.015, 0.02, "greater", -0.02, "reproduces"),  # non-inferiority margin
        (-0.5, -0.3, "less", -0.1, "reproduces"),  # minimum effect size
        (-0.05, -0.02, "less", -0.1, "contradicts"),  # significant but smaller than claimed
        (-0.15, -0.05, "less", -0.1, "inconclusive"),
    ],
)
def test_verdict_rule(low, high, expect, threshold, label):
    rng = np.random.default_rng(6)
    c = compare_arms(*zip(*[_paired(rng, 20, 0.0) for _ in range(2)]), n_boot=50)
    from dataclasses import replace

    c = replace(c, ci=replace(c.ci, estimate=(low + high) / 2, low=low, high=high))
    v = verdict(c, expect=expect, threshold=threshold)
    assert v["verdict"] == label


def test_combine_verdicts():
    r, c, i = ({"verdict": x} for x in ("reproduces", "contradicts", "inconclusive"))
    assert combine_verdicts([r, r])["verdict"] == "reproduces"
    assert combine_verdicts([r, i])["verdict"] == "inconclusive"
    assert combine_verdicts([r, i, c])["verdict"] == "contradicts"
    with pytest.raises(ValueError, match="unknown verdict"):
        combine_verdicts([{"verdict": "maybe"}])
    with pytest.raises(ValueError, match="at least one"):
        combine_verdicts([])


def test_bad_inputs_have_clear_errors():
    with pytest.raises(ValueError, match="same length"):
        paired_bootstrap([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="NaN"):
        paired_bootstrap([1, float("nan")], [1, 2])
    with pytest.raises(ValueError, match="confidence"):
        paired_bootstrap([1, 2], [1, 2], confidence=95)
    with pytest.raises(ValueError, match="n_boot"):
        paired_bootstrap([1, 2], [1, 2], n_boot=3)
    with pytest.raises(ValueError, match="same, non-zero number of seeds"):
        compare_arms([[1, 2]], [[1, 2], [1, 2]])
    with pytest.raises(ValueError, match="same items"):
        compare_arms([[1, 2, 3], [1, 2]], [[1, 2, 3], [1, 2]])
    with pytest.raises(ValueError, match="expect"):
        verdict(compare_arms([[1.0, 2.0]], [[1.0, 2.5]], n_boot=20), expect="bigger")


def test_pooled_auc_bootstrap_resamples_every_query():
    """Regression: the grouped pools were a 3-tuple, so the bootstrap drew from queries 0..2 only."""
    from st_magnitude.evaluation.auc import pooled_auc_score
    from st_magnitude.lab.replication.claims._shared import compare_auc
    from st_magnitude.lab.replication.common import pooled_auc_statistic

    rng = np.random.default_rng(7)
    n_q = 12

    def arm(shift):
        pos = rng.normal((1 + shift * np.arange(n_q) / n_q)[:, None], 1, (n_q, 2))
        neg = rng.normal(0, 1, (n_q, 5))
        pools = {
            "positives": pos.ravel().tolist(),
            "negatives": neg.ravel().tolist(),
            "positive_query": np.repeat(np.arange(n_q), 2).tolist(),
            "negative_query": np.repeat(np.arange(n_q), 5).tolist(),
        }
        full = pooled_auc_score(pos.ravel(), neg.ravel())
        return {"auc_pools": pools, "per_query": {"ndcg@10": [0.0] * n_q}}, full

    (a, auc_a), (b, auc_b) = arm(2.0), arm(0.0)
    assert len(pooled_auc_statistic(a["auc_pools"])) == n_q
    seeds = [{"arms": {"x": {"d": a}, "y": {"d": b}}}]
    c = compare_auc(seeds, "x", "y", "d", n_boot=50)
    assert c.diff == pytest.approx(auc_a - auc_b)
    assert c.mean_a == pytest.approx(auc_a)
