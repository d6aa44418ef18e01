"""Statistics for multi-seed comparisons of two arms (used by ``st-magnitude replicate``; reusable elsewhere).

The unit of evidence is a *paired* comparison of two arms (two trained models, or a model and its base) on the same
evaluation items (queries, or STS pairs), repeated over training seeds. The per-item difference ``d[s, q]`` (seed
``s``, item ``q``) varies for three reasons: the training run (seed effect), which items happen to be in the test set
(item effect; every seed uses the *same* items), and their interaction (plus per-item noise). The mean difference's
variance is the sum of the three, each divided by how often it is averaged over:

    Var(mean d) = σ²_seed / k + σ²_item / n + σ²_seed×item / (k n)        (k seeds, n items)

:func:`crossed_interval` estimates the three components from the ``k × n`` matrix by the method of moments of the
two-way crossed random-effects ANOVA without replication (Searle, Casella & McCulloch 1992, *Variance Components*,
ch. 4, balanced two-way crossed classification: E[MS_seed] = σ²_e + n σ²_seed, E[MS_item] = σ²_e + k σ²_item,
E[MS_res] = σ²_e; a negative estimate is set to 0), and returns ``mean ± t_ν · SE`` with ``ν`` the Satterthwaite
(1946, Biometrics Bulletin 2(6), 110–114) degrees of freedom of that linear combination of mean squares. Our choice:
in ``ν`` each positive mean square enters at its one-sided 90 % upper confidence bound ``MS · df / χ²_0.10(df)``.
With 3 seeds the seed mean square has 2 degrees of freedom; when it is small by chance, plain Satterthwaite also
raises ``ν`` and the interval undercovers (0.92 where seed noise dominates; a 75 % bound: 0.934–0.946); the 90 %
bound keeps every simulated cell with 3 or more seeds ≥ 0.94, at the cost of a wider interval with 3 seeds (about
+20 % where both noises matter, ≤ 5 % with 5 seeds). :func:`compare_arms` uses it:

- per-item metric scores (per-query nDCG@10): ``d`` is the per-item difference;
- a statistic that is not an item mean (Spearman over STS pairs, pooled AUC over queries): ``d`` holds the
  delete-one jackknife pseudo-values ``n θ_s − (n − 1) θ_s(−q)`` of each seed's difference θ_s (Quenouille 1956;
  Tukey 1958) — for a mean they equal the per-item differences exactly — and the interval is centred on the mean
  of the θ_s.

With one seed the interval covers item noise only (``seed_noise_covered`` is False and the method says so); with one
item, seed noise only. The simulated coverage under a crossed seed × item model (regimes where either noise or the
interaction dominates; 3, 5 and 10 seeds) is in ``docs/replication.md`` (``benchmarks/bench_interval_coverage.py``)
and is asserted in the default test suite.

Also reported, not used for verdicts: per seed a paired percentile bootstrap over items (:func:`paired_bootstrap`,
:func:`paired_bootstrap_fn`), a Student-t interval over the per-seed differences (:func:`seed_interval`, blind to
item noise: every seed uses the same items) and a paired bootstrap of the seed-averaged difference (blind to seed
noise).

Verdicts on these comparisons (a claim fixed before running, Holm's step-down, statements) are in
:mod:`st_magnitude.evaluation.verdicts`.

For ``st-magnitude compare --seeds N`` (5 seeds recommended): collect, per seed, the per-query nDCG@10 of each
variant (same query ids in the same order) and call ``compare_arms(per_seed_a, per_seed_b)``; its ``ci`` and
``significant`` give the CI columns, and ``describe()`` the verdict line ("within noise" when not significant).
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

logger = logging.getLogger(__name__)

__all__ = [
    "ArmComparison",
    "Interval",
    "VarianceComponents",
    "compare_arms",
    "crossed_interval",
    "crossed_intervals",
    "jackknife_pseudo_values",
    "one_sided_bounds",
    "resample_counts",
    "paired_bootstrap",
    "paired_bootstrap_fn",
    "seed_interval",
    "variance_components",
]

#: the degrees of freedom use each positive mean square's one-sided upper confidence bound at this level (see
#: :func:`crossed_interval`)
DF_UPPER_BOUND = 0.9
#: resamples of items of the bootstrap-t that widens the interval on the side where the studentized mean has the
#: longer tail (skewed item effects; :func:`crossed_interval`); its random stream is fixed, so intervals recompute
T_BOOT = 1999
T_BOOT_SEED = 0
#: one-sided levels kept with every comparison (0.025 / j, j = 1 … :data:`HOLM_MAX_PARTS`): the bounds Holm's
#: step-down needs over up to that many judged parts (:func:`holm`)
HOLM_MAX_PARTS = 10


@dataclass(frozen=True)
class Interval:
    """A point estimate with a two-sided confidence interval (``low``/``high`` may be ±inf when undefined)."""

    estimate: float
    low: float
    high: float
    confidence: float
    method: str

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    def to_dict(self) -> dict:
        return asdict(self)


def _check_confidence(confidence: float) -> float:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return float(confidence)


def _check_n_boot(n_boot: int) -> int:
    if not isinstance(n_boot, (int, np.integer)) or n_boot < 10:
        raise ValueError(f"n_boot must be an integer >= 10, got {n_boot!r}")
    return int(n_boot)


def _percentile_interval(estimate: float, samples: np.ndarray, confidence: float, method: str) -> Interval:
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(samples, [alpha, 1 - alpha])
    return Interval(float(estimate), float(lo), float(hi), confidence, method)


def _paired_arrays(a: Sequence[float], b: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.ndim != 1 or a.shape != b.shape:
        raise ValueError(
            f"paired scores must be two 1-d arrays of the same length, got shapes {a.shape} and {b.shape}"
        )
    if len(a) < 2:
        raise ValueError(f"a paired bootstrap needs at least 2 items, got {len(a)}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("paired scores contain NaN or inf")
    return a, b


def paired_bootstrap(
    a: Sequence[float],
    b: Sequence[float],
    *,
    n_boot: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Interval:
    """Percentile bootstrap interval of ``mean(a) − mean(b)`` for per-item scores of two arms on the same items."""
    a, b = _paired_arrays(a, b)
    n_boot, confidence = _check_n_boot(n_boot), _check_confidence(confidence)
    d = a - b
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(d), size=(n_boot, len(d)))
    return _percentile_interval(d.mean(), d[idx].mean(axis=1), confidence, "paired bootstrap (items)")


def paired_bootstrap_fn(
    diff_fn: Callable[[np.ndarray], float],
    n_items: int,
    *,
    n_boot: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Interval:
    """Percentile bootstrap of any paired statistic: ``diff_fn(idx)`` returns stat_a − stat_b on items ``idx``.

    Use it for statistics that are not means over items (Spearman over STS pairs, pooled AUC over queries); the
    estimate is ``diff_fn(arange(n_items))``.
    """
    if n_items < 2:
        raise ValueError(f"a paired bootstrap needs at least 2 items, got {n_items}")
    n_boot, confidence = _check_n_boot(n_boot), _check_confidence(confidence)
    rng = np.random.default_rng(seed)
    samples = np.array([diff_fn(rng.integers(0, n_items, size=n_items)) for _ in range(n_boot)], dtype=np.float64)
    samples = samples[np.isfinite(samples)]
    if len(samples) < n_boot // 2:
        raise ValueError("the statistic was undefined (NaN/inf) on most bootstrap samples")
    return _percentile_interval(diff_fn(np.arange(n_items)), samples, confidence, "paired bootstrap (items)")


def seed_interval(values: Sequence[float], *, confidence: float = 0.95) -> Interval:
    """Student-t interval of the mean of per-seed values (``mean ± t_{n−1} · sd/√n``); ±inf for one seed."""
    from scipy import stats

    confidence = _check_confidence(confidence)
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1 or len(v) == 0:
        raise ValueError("seed_interval needs a non-empty 1-d sequence of per-seed values")
    if not np.isfinite(v).all():
        raise ValueError("per-seed values contain NaN or inf")
    m = float(v.mean())
    if len(v) == 1:
        return Interval(m, -math.inf, math.inf, confidence, "t-interval over seeds (1 seed: undefined)")
    half = float(stats.t.ppf(0.5 + confidence / 2, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v)))
    return Interval(m, m - half, m + half, confidence, f"t-interval over {len(v)} seeds")


@dataclass(frozen=True)
class VarianceComponents:
    """Method-of-moments variance components of a ``k × n`` (seeds × items) matrix of paired differences.

    ``seed``, ``item``, ``residual``: σ²_seed, σ²_item and σ²_seed×item (+ noise) estimates (≥ 0); ``se``: standard
    error of the grand mean from their sum; ``df``: the degrees of freedom of its t quantile (Satterthwaite);
    ``covers``: the noise sources the interval accounts for.
    """

    seed: float
    item: float
    residual: float
    n_seeds: int
    n_items: int
    se: float
    df: float
    covers: str

    @property
    def seed_noise_covered(self) -> bool:
        return self.n_seeds > 1

    def to_dict(self) -> dict:
        return {**asdict(self), "seed_noise_covered": self.seed_noise_covered}


def _check_diffs(diffs: np.ndarray) -> np.ndarray:
    d = np.asarray(diffs, dtype=np.float64)
    if d.ndim < 2 or d.size == 0:
        raise ValueError(f"paired differences must be a non-empty seeds × items matrix, got shape {d.shape}")
    if not np.isfinite(d).all():
        raise ValueError("paired differences contain NaN or inf")
    if d.shape[-2] == 1 and d.shape[-1] == 1:
        raise ValueError("an interval needs at least 2 seeds or 2 items, got 1 seed and 1 item")
    return d


def _components(d: np.ndarray) -> dict[str, np.ndarray]:
    """Variance components, SE of the mean and Satterthwaite df of ``d[..., seeds, items]`` (vectorised)."""
    from scipy import stats

    k, n = d.shape[-2:]
    d = d - d[..., :1, :1]  # shift-invariant; a constant matrix becomes exactly 0 (no round-off variance)
    if k == 1 or n == 1:  # one noise source only: the plain t-interval over the other axis
        v = d.reshape(*d.shape[:-2], k * n).var(axis=-1, ddof=1)
        zero = np.zeros_like(v)
        seed, item = (zero, v) if k == 1 else (v, zero)
        return {"seed": seed, "item": item, "residual": zero, "se": np.sqrt(v / (k * n)), "df": zero + k * n - 1}
    grand = d.mean(axis=(-2, -1), keepdims=True)
    rows, cols = d.mean(axis=-1, keepdims=True), d.mean(axis=-2, keepdims=True)
    df_s, df_q, df_e = k - 1, n - 1, (k - 1) * (n - 1)
    ms_s = n * ((rows - grand) ** 2).sum(axis=(-2, -1)) / df_s
    ms_q = k * ((cols - grand) ** 2).sum(axis=(-2, -1)) / df_q
    ms_e = ((d - rows - cols + grand) ** 2).sum(axis=(-2, -1)) / df_e
    seed, item = np.maximum(0.0, (ms_s - ms_e) / n), np.maximum(0.0, (ms_q - ms_e) / k)
    # k n Var(mean) = [MS_s − MS_e]+ + [MS_q − MS_e]+ + MS_e: a linear combination Σ c_i MS_i (c_i ∈ {−1, 0, 1})
    c_s, c_q = (seed > 0).astype(np.float64), (item > 0).astype(np.float64)
    c_e = 1.0 - c_s - c_q
    total = c_s * ms_s + c_q * ms_q + c_e * ms_e
    # Satterthwaite df of that sum, each positive term at its upper bound MS·df/χ²_{1−level}(df): a mean square that
    # is small by chance (3 seeds: χ² on 2 df) must not also buy degrees of freedom (coverage: module docstring)
    up = {f: f / float(stats.chi2.ppf(1 - DF_UPPER_BOUND, f)) for f in (df_s, df_q, df_e)}
    t_s, t_q = c_s * ms_s * up[df_s], c_q * ms_q * up[df_q]
    t_e = c_e * ms_e * np.where(c_e > 0, up[df_e], 1.0)
    denom = t_s**2 / df_s + t_q**2 / df_q + t_e**2 / df_e
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.where(denom > 0, (t_s + t_q + t_e) ** 2 / np.where(denom > 0, denom, 1.0), np.inf)
    var_mean = np.maximum(0.0, total) / (k * n)
    return {"seed": seed, "item": item, "residual": ms_e, "se": np.sqrt(var_mean), "df": df}


def resample_counts(n_items: int, n_boot: int = T_BOOT, seed: int = T_BOOT_SEED) -> np.ndarray:
    """``n_boot × n_items`` counts of each item in a resample of the items with replacement (a fixed stream)."""
    if n_boot < 10:
        raise ValueError(f"n_boot must be >= 10, got {n_boot}")
    rng = np.random.default_rng(seed)
    return rng.multinomial(n_items, np.full(n_items, 1.0 / n_items), size=n_boot).astype(np.float64)


def _bootstrap_t(d: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Studentized means ``(mean* − mean) / SE*`` of ``d[..., seeds, items]`` resampled over items (whole columns:
    every seed keeps its values of a drawn item) by ``counts`` (``B × n``); SE* is the crossed SE of the resample
    (:func:`_components`, computed from column sums). Shape ``[..., B]``; NaN where a resample has no variation."""
    k, n = d.shape[-2:]
    kn = k * n
    d = d - d.mean(axis=(-2, -1), keepdims=True)
    col, sq = d.sum(axis=-2), (d**2).sum(axis=-2)
    g = col @ counts.T / kn
    ss_tot = sq @ counts.T - kn * g**2
    if k == 1:
        var = np.maximum(0.0, ss_tot) / (kn - 1)
    else:
        rows = np.einsum("...kn,bn->...bk", d, counts) / n
        ss_s = n * ((rows - g[..., None]) ** 2).sum(axis=-1)
        ss_q = (col**2 / k) @ counts.T - kn * g**2
        ms_s, ms_q = ss_s / (k - 1), ss_q / (n - 1)
        ms_e = (ss_tot - ss_s - ss_q) / ((k - 1) * (n - 1))
        c_s, c_q = (ms_s > ms_e).astype(np.float64), (ms_q > ms_e).astype(np.float64)
        var = np.maximum(0.0, c_s * ms_s + c_q * ms_q + (1.0 - c_s - c_q) * ms_e)
    se = np.sqrt(var / kn)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(se > 1e-12 * (np.abs(g) + 1.0), g / se, np.nan)


def _multipliers(d: np.ndarray, df: np.ndarray, alphas: Sequence[float], n_boot: int, seed: int) -> tuple:
    """Per one-sided level ``a`` in ``alphas``: the multipliers of SE below and above the mean — ``t_ν(1 − a)``,
    widened (never narrowed) to the bootstrap-t quantile of that side (equal-tailed) or of ``|T*|`` (symmetric),
    whichever is larger, where the studentized mean over resampled items has a longer tail than t."""
    from scipy import stats

    k, n = d.shape[-2:]
    t = [stats.t.ppf(1 - a, df) for a in alphas]
    if n < 3:  # one or two items: nothing to resample
        return t, t
    counts = resample_counts(n, n_boot, seed)
    flat = d.reshape(-1, k, n)  # in chunks: the resampled row means are chunk × B × k
    tstar = np.concatenate([_bootstrap_t(flat[i : i + 64], counts) for i in range(0, len(flat), 64)])
    tstar = tstar.reshape(*d.shape[:-2], counts.shape[0])
    below, above = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN resample set (no variation): plain t
        for a, ta in zip(alphas, t):
            lo, hi = np.nanquantile(tstar, [a, 1 - a], axis=-1)
            sym = np.nanquantile(np.abs(tstar), 1 - 2 * a, axis=-1)  # the symmetric bootstrap-t (Hall 1988)
            # the interval for the mean is [m − q(1−a)·SE, m − q(a)·SE]: the upper quantile sets the lower end
            below.append(np.fmax(np.fmax(ta, hi), sym))
            above.append(np.fmax(np.fmax(ta, -lo), sym))
    return below, above


def crossed_intervals(
    diffs: np.ndarray, *, confidence: float = 0.95, n_boot: int = T_BOOT, seed: int = T_BOOT_SEED
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`crossed_interval` vectorised over leading axes: ``diffs[..., seeds, items]`` → ``(mean, low, high)``
    arrays (for simulations; every matrix must be finite; every matrix uses the same item resamples)."""
    confidence = _check_confidence(confidence)
    d = _check_diffs(diffs)
    c = _components(d)
    mean = d.mean(axis=(-2, -1))
    (below,), (above,) = _multipliers(d, c["df"], [(1 - confidence) / 2], n_boot, seed)
    se = c["se"]
    with np.errstate(invalid="ignore"):
        lo = np.where(se > 0, mean - below * se, mean)
        hi = np.where(se > 0, mean + above * se, mean)
    return mean, lo, hi


def variance_components(diffs: np.ndarray) -> VarianceComponents:
    """The :class:`VarianceComponents` of a ``seeds × items`` matrix of paired differences (at least 2 seeds or
    2 items; finite values)."""
    d = _check_diffs(diffs)
    if d.ndim != 2:
        raise ValueError(f"paired differences must be a seeds × items matrix, got shape {d.shape}")
    k, n = d.shape
    c = {key: float(v) for key, v in _components(d).items()}
    covers = "item noise only: 1 seed" if k == 1 else "seed noise only: 1 item" if n == 1 else "seed + item noise"
    return VarianceComponents(c["seed"], c["item"], c["residual"], k, n, c["se"], c["df"], covers)


def crossed_interval(
    diffs: np.ndarray,
    *,
    confidence: float = 0.95,
    center: float | None = None,
    n_boot: int = T_BOOT,
    seed: int = T_BOOT_SEED,
) -> Interval:
    """``mean − a·SE … mean + b·SE`` for a ``seeds × items`` matrix of paired differences: SE from the seed, item and
    seed × item variance components (see the module docstring; they are :func:`variance_components` of the same
    matrix), ``a`` and ``b`` the t quantile with Satterthwaite degrees of freedom ν, each widened — never narrowed —
    to the quantile of a bootstrap-t over items (``n_boot`` resamples of whole item columns, studentized by the
    resample's own crossed SE; the larger of its equal-tailed quantile on that side and its symmetric one, Hall
    1988, Ann. Statist. 16, 927–953) where that has the longer tail. Skewed item effects (a few queries with large
    gains, most with none) make the studentized mean skewed; the symmetric t then misses on one side.

    ``center`` replaces the grand mean as the estimate (used for jackknife pseudo-values, whose mean is the
    bias-corrected statistic). One seed: item noise only; one item: seed noise only (the method says so).
    """
    return one_sided_bounds(diffs, confidence=confidence, center=center, n_boot=n_boot, seed=seed)[0]


def one_sided_bounds(
    diffs: np.ndarray,
    *,
    confidence: float = 0.95,
    center: float | None = None,
    n_boot: int = T_BOOT,
    seed: int = T_BOOT_SEED,
    holm_parts: int = 0,
) -> tuple[Interval, list[dict[str, float]]]:
    """:func:`crossed_interval` and, for ``j = 1 … holm_parts``, the interval's ends at the one-sided level
    ``(1 − confidence) / 2 / j`` (``[{"alpha", "low", "high"}, ...]``: what :func:`holm` reads)."""
    confidence = _check_confidence(confidence)
    vc = variance_components(diffs)
    d = np.asarray(diffs, dtype=np.float64)
    m = float(np.mean(d)) if center is None else float(center)
    alpha = (1 - confidence) / 2
    alphas = [alpha / j for j in range(1, max(1, holm_parts) + 1)]
    if vc.se == 0:
        how = f"no variation in the paired differences ({vc.covers})"
        return Interval(m, m, m, confidence, how), [{"alpha": a, "low": m, "high": m} for a in alphas[:holm_parts]]
    below, above = _multipliers(d, np.asarray(vc.df), alphas, n_boot, seed)
    ends = [(m - float(b) * vc.se, m + float(a) * vc.se) for b, a in zip(below, above)]
    if vc.n_seeds == 1:
        how = f"t over {vc.n_items} items, df {vc.df:.0f} (1 seed: item noise only, seed noise not covered)"
    elif vc.n_items == 1:
        how = f"t over {vc.n_seeds} seeds, df {vc.df:.0f} (1 item: seed noise only, item noise not covered)"
    else:
        how = f"t (Satterthwaite df {vc.df:.1f}) on seed + item + seed×item variance"
    if vc.n_items >= 3:
        how += f", each end widened to a bootstrap-t over items ({n_boot} resamples) where its tail is longer"
    bounds = [{"alpha": a, "low": lo, "high": hi} for a, (lo, hi) in zip(alphas, ends)][:holm_parts]
    return Interval(m, ends[0][0], ends[0][1], confidence, how), bounds


def jackknife_pseudo_values(stat: Callable[[np.ndarray], float], n_items: int) -> np.ndarray:
    """Delete-one jackknife pseudo-values ``n θ − (n − 1) θ(−q)`` of ``stat(idx)`` over ``n_items`` items
    (Quenouille 1956; Tukey 1958); for a mean over items they are the items' values."""
    if n_items < 2:
        raise ValueError(f"jackknife pseudo-values need at least 2 items, got {n_items}")
    full = np.arange(n_items)
    theta = float(stat(full))
    loo = np.array([stat(np.delete(full, q)) for q in range(n_items)], dtype=np.float64)
    if not (math.isfinite(theta) and np.isfinite(loo).all()):
        bad = int((~np.isfinite(loo)).sum())
        raise ValueError(
            f"the statistic is undefined (NaN/inf) on the full item set or with one item left out ({bad} of "
            f"{n_items} items); it needs a finite value on every subset of n − 1 items"
        )
    return n_items * theta - (n_items - 1) * loo


@dataclass(frozen=True)
class ArmComparison:
    """Difference ``a − b`` of one metric between two arms over seeds (see the module docstring)."""

    metric: str
    arm_a: str
    arm_b: str
    mean_a: float
    mean_b: float
    per_seed_diff: tuple[float, ...]
    per_seed_ci: tuple[Interval, ...]
    across_seeds: Interval
    bootstrap: Interval
    ci: Interval
    n_seeds: int
    components: VarianceComponents | None = None
    #: the interval's ends at one-sided levels 0.025/j (:func:`one_sided_bounds`), for :func:`holm`
    bounds: tuple[dict[str, float], ...] = ()

    @property
    def diff(self) -> float:
        return self.ci.estimate

    @property
    def significant(self) -> bool:
        return self.ci.excludes_zero

    def describe(self, digits: int = 4) -> str:
        f = f"{{:+.{digits}f}}"
        ci = f"[{f.format(self.ci.low)}, {f.format(self.ci.high)}]"
        what = "significant" if self.significant else "within noise"
        seeds = f"{self.n_seeds} seed" + ("s" if self.n_seeds != 1 else "")
        return f"{self.metric}: {self.arm_a} − {self.arm_b} = {f.format(self.diff)} (95% CI {ci}, {seeds}; {what})"

    def to_dict(self) -> dict:
        return {
            "metric": self.metric,
            "arm_a": self.arm_a,
            "arm_b": self.arm_b,
            "mean_a": self.mean_a,
            "mean_b": self.mean_b,
            "diff": self.diff,
            "per_seed_diff": list(self.per_seed_diff),
            "per_seed_ci": [c.to_dict() for c in self.per_seed_ci],
            "across_seeds": self.across_seeds.to_dict(),
            "bootstrap": self.bootstrap.to_dict(),
            "ci": self.ci.to_dict(),
            "significant": self.significant,
            "n_seeds": self.n_seeds,
            "components": None if self.components is None else self.components.to_dict(),
            "one_sided_bounds": [dict(b) for b in self.bounds],
            "describe": self.describe(),
        }


def compare_arms(
    per_seed_a: Sequence[Sequence[float]],
    per_seed_b: Sequence[Sequence[float]],
    *,
    statistic: Callable[[np.ndarray, np.ndarray], float] | None = None,
    metric: str = "metric",
    arm_a: str = "a",
    arm_b: str = "b",
    n_boot: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> ArmComparison:
    """Compare two arms over seeds from their per-item scores.

    Args:
        per_seed_a, per_seed_b: one array per seed of per-item values (the same items, in the same order, in every
            seed and both arms). With ``statistic=None`` the values are per-item metric scores (e.g. per-query
            nDCG@10) and the statistic is their mean.
        statistic: ``statistic(values, idx) -> float`` for statistics that are not item means (e.g. Spearman of
            predictions against labels, pooled AUC): called with one seed's values and the item indices to use.
        metric, arm_a, arm_b: labels for reports.
        n_boot, confidence, seed: replicates, interval level and RNG seed of the reported (not judged) bootstraps.

    ``ci`` (what ``significant`` and :func:`verdict` use) is :func:`crossed_interval` of the seeds × items paired
    differences (jackknife pseudo-values for a ``statistic``); ``components`` holds its variance components.
    ``across_seeds`` (t over seeds) and ``bootstrap`` (items, seed-averaged) are each blind to one noise source and
    are reported only.
    """
    if len(per_seed_a) != len(per_seed_b) or len(per_seed_a) == 0:
        raise ValueError(
            f"need the same, non-zero number of seeds per arm, got {len(per_seed_a)} and {len(per_seed_b)}"
        )
    if statistic is None:
        arrays = [_paired_arrays(a, b) for a, b in zip(per_seed_a, per_seed_b)]
        n_items = {len(a) for a, _ in arrays}
        if len(n_items) != 1:
            raise ValueError(f"every seed must score the same items, got item counts {sorted(n_items)}")
        per_seed_ci = tuple(
            paired_bootstrap(a, b, n_boot=n_boot, confidence=confidence, seed=seed + i)
            for i, (a, b) in enumerate(arrays)
        )
        mean_a = float(np.mean([a.mean() for a, _ in arrays]))
        mean_b = float(np.mean([b.mean() for _, b in arrays]))
        matrix = np.stack([a - b for a, b in arrays])  # seeds × items paired differences
        pooled = matrix.mean(axis=0)  # seed-averaged per-item difference
        boot = paired_bootstrap(pooled, np.zeros_like(pooled), n_boot=n_boot, confidence=confidence, seed=seed)
    else:
        n_items = {len(a) for a in per_seed_a} | {len(b) for b in per_seed_b}
        if len(n_items) != 1:
            raise ValueError(f"every seed and arm must score the same items, got item counts {sorted(n_items)}")
        n = n_items.pop()

        def diff_at(i: int) -> Callable[[np.ndarray], float]:
            return lambda idx: statistic(per_seed_a[i], idx) - statistic(per_seed_b[i], idx)

        per_seed_ci = tuple(
            paired_bootstrap_fn(diff_at(i), n, n_boot=n_boot, confidence=confidence, seed=seed + i)
            for i in range(len(per_seed_a))
        )
        full = np.arange(n)
        mean_a = float(np.mean([statistic(a, full) for a in per_seed_a]))
        mean_b = float(np.mean([statistic(b, full) for b in per_seed_b]))
        k = len(per_seed_a)
        if n < 2:
            raise ValueError(f"a statistic over items needs at least 2 items, got {n}")
        matrix = np.stack([jackknife_pseudo_values(diff_at(i), n) for i in range(k)])
        boot = paired_bootstrap_fn(
            lambda idx: float(np.mean([diff_at(i)(idx) for i in range(k)])),
            n,
            n_boot=n_boot,
            confidence=confidence,
            seed=seed,
        )
    diffs = tuple(c.estimate for c in per_seed_ci)
    across = seed_interval(diffs, confidence=confidence)
    vc = variance_components(matrix)
    if not vc.seed_noise_covered:
        logger.warning(
            "%s: %s − %s from 1 seed: the interval covers item noise only, not seed noise", metric, arm_a, arm_b
        )
    ci, bounds = one_sided_bounds(
        matrix, confidence=confidence, center=float(np.mean(diffs)), holm_parts=HOLM_MAX_PARTS
    )
    return ArmComparison(
        metric, arm_a, arm_b, mean_a, mean_b, diffs, per_seed_ci, across, boot, ci, len(diffs), vc, tuple(bounds)
    )
