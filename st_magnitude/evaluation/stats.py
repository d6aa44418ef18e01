"""Statistics for multi-seed comparisons of two arms (used by ``st-magnitude replicate``; reusable elsewhere).

The unit of evidence is a *paired* comparison of two arms (two trained models, or a model and its base) on the same
evaluation items (queries, or STS pairs), repeated over training seeds:

- **within a seed**: a paired percentile bootstrap over items (:func:`paired_bootstrap`,
  :func:`paired_bootstrap_fn`) — how much the difference depends on which queries happened to be in the test set;
- **across seeds**: a Student-t interval over the per-seed differences (:func:`seed_interval`) — how much it
  depends on the training run;
- **combined** (:func:`compare_arms`): the reported 95 % interval is the *union* of the across-seed t-interval and a
  paired bootstrap of the seed-averaged difference (the same resampled items in every seed). A difference is
  ``significant`` only when that union excludes 0, i.e. when neither source of noise can explain it. With a single
  seed only the bootstrap interval exists and the result says so (``n_seeds == 1``).

:func:`verdict` turns a comparison into ``reproduces`` / ``contradicts`` / ``inconclusive`` against a claim of the
form "diff > threshold" (or "< threshold"), fixed before running; :func:`combine_verdicts` joins several.

For ``st-magnitude compare --seeds N``: collect, per seed, the per-query nDCG@10 of each variant (same query ids in
the same order) and call ``compare_arms(per_seed_a, per_seed_b)``; its ``ci`` and ``significant`` give the CI
columns, and ``describe()`` the verdict line ("within noise" when not significant).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

__all__ = [
    "ArmComparison",
    "Interval",
    "VERDICTS",
    "combine_verdicts",
    "compare_arms",
    "paired_bootstrap",
    "paired_bootstrap_fn",
    "seed_interval",
    "verdict",
]

VERDICTS = ("reproduces", "contradicts", "inconclusive")


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
        n_boot, confidence, seed: bootstrap replicates, interval level, RNG seed.
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
        pooled = np.mean([a - b for a, b in arrays], axis=0)  # seed-averaged per-item difference
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
        boot = paired_bootstrap_fn(
            lambda idx: float(np.mean([diff_at(i)(idx) for i in range(k)])),
            n,
            n_boot=n_boot,
            confidence=confidence,
            seed=seed,
        )
    diffs = tuple(c.estimate for c in per_seed_ci)
    across = seed_interval(diffs, confidence=confidence)
    union = Interval(
        across.estimate,
        min(across.low, boot.low),
        max(across.high, boot.high),
        confidence,
        "union of the t-interval over seeds and the paired bootstrap over items"
        if len(diffs) > 1
        else "paired bootstrap over items (1 seed: seed spread unknown)",
    )
    if len(diffs) == 1:
        union = Interval(across.estimate, boot.low, boot.high, confidence, union.method)
    return ArmComparison(metric, arm_a, arm_b, mean_a, mean_b, diffs, per_seed_ci, across, boot, union, len(diffs))


def verdict(comparison: ArmComparison, *, expect: str = "greater", threshold: float = 0.0) -> dict:
    """The verdict on a claim about ``diff = a − b``, fixed before running.

    ``expect="greater"``: the claim is ``diff > threshold`` (``threshold=0``: a is better; a negative threshold
    is a non-inferiority margin, e.g. ``−0.02`` for "at least as good, within 0.02"; a positive one a minimum
    effect size). ``expect="less"``: the claim is ``diff < threshold``.

    - ``reproduces``: the whole 95 % interval lies on the claimed side of ``threshold``;
    - ``contradicts``: the whole interval lies on the other side;
    - ``inconclusive``: the interval contains ``threshold``.
    """
    if expect not in ("greater", "less"):
        raise ValueError(f"expect must be 'greater' or 'less', got {expect!r}")
    lo, hi = comparison.ci.low, comparison.ci.high
    if expect == "greater":
        ok, bad, sign = lo > threshold, hi < threshold, ">"
    else:
        ok, bad, sign = hi < threshold, lo > threshold, "<"
    label = "reproduces" if ok else "contradicts" if bad else "inconclusive"
    claim = f"{comparison.metric}: {comparison.arm_a} − {comparison.arm_b} {sign} {threshold:+g}"
    return {
        "verdict": label,
        "claim": claim,
        "reason": f"{comparison.describe()}; claim {claim} → {label}",
        "comparison": comparison.to_dict(),
    }


def combine_verdicts(parts: Sequence[dict]) -> dict:
    """All parts reproduce → ``reproduces``; any part contradicts → ``contradicts``; else ``inconclusive``."""
    if not parts:
        raise ValueError("combine_verdicts needs at least one verdict")
    labels = [p["verdict"] for p in parts]
    bad = [lab for lab in labels if lab not in VERDICTS]
    if bad:
        raise ValueError(f"unknown verdict {bad[0]!r}; valid: {', '.join(VERDICTS)}")
    if all(lab == "reproduces" for lab in labels):
        label = "reproduces"
    elif any(lab == "contradicts" for lab in labels):
        label = "contradicts"
    else:
        label = "inconclusive"
    return {"verdict": label, "parts": list(parts)}
