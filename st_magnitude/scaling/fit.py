"""Scaling-law fits of paper 003 (Killingback et al., SIGIR 2026).

Dimension-only law, paper eq. 5::      L(D)    = A / D^α + δ_D
Joint law, paper eq. 6::               L(D, N) = A / D^α + B / N^β + δ        (N in millions of parameters)

The paper fits both with ``scipy.optimize.curve_fit`` from unstated starting points; from curve_fit's default
``p0 = 1`` the dimension fit diverges on data like the paper's (α → 12.6, R² = 0). We use
*variable projection*: the laws are linear in (A, δ) / (A, B, δ) once the exponents are fixed, so for every
exponent on a grid we solve a non-negative linear least-squares problem (A, B, δ ≥ 0), take the best grid point,
then refine all parameters with bounded ``curve_fit`` (trust-region reflective). A user ``p0`` is refined too and
the better of the two solutions (lower squared error) is kept. R² = 1 − SS_res/SS_tot (in-sample, as the paper);
95% intervals come from a residual bootstrap (an addition; the paper reports none).
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import optimize

logger = logging.getLogger(__name__)

DEFAULT_ALPHA_GRID = np.concatenate([np.linspace(0.01, 1.0, 100), np.linspace(1.02, 4.0, 150)])
DEFAULT_BETA_GRID = np.concatenate([np.linspace(0.02, 1.0, 50), np.linspace(1.05, 3.0, 40)])
_EXPONENT_MAX = 8.0

#: Paper Table 1 (dimension-only fits; (A, α, δ_D) per model and evaluation set; R² as published).
PAPER_DIMENSION_LAWS: dict[str, dict[str, float]] = {
    "BERT-L2-H128-A2/MS": {"A": 84.73, "alpha": 1.71, "delta": 0.128, "r2": 0.9988},
    "BERT-L2-H128-A2/TREC": {"A": 319.19, "alpha": 1.73, "delta": 0.953, "r2": 0.9984},
    "BERT-L8-H512-A8/MS": {"A": 55.21, "alpha": 1.76, "delta": 0.024, "r2": 0.9998},
    "BERT-L8-H512-A8/TREC": {"A": 158.77, "alpha": 1.48, "delta": 0.341, "r2": 0.9997},
    "BERT-L12-H768-A12/MS": {"A": 170.38, "alpha": 2.08, "delta": 0.018, "r2": 0.9917},
    "BERT-L12-H768-A12/TREC": {"A": 96.42, "alpha": 1.33, "delta": 0.342, "r2": 0.9953},
    "Ettin-L19-H512-A8/MS": {"A": 1.75, "alpha": 0.91, "delta": 0.058, "r2": 0.9953},
    "Ettin-L19-H512-A8/TREC": {"A": 6.00, "alpha": 0.75, "delta": 0.690, "r2": 0.9941},
    "Ettin-L28-H1792-A28/MS": {"A": 0.06, "alpha": 0.45, "delta": 0.022, "r2": 0.5325},
}

#: Paper Table 2 (joint fits; N in millions).
PAPER_JOINT_LAWS: dict[str, dict[str, float]] = {
    "BERT/MS": {"A": 114.887, "B": 0.800, "alpha": 1.887, "beta": 1.247, "delta": 0.013, "r2": 0.975},
    "BERT/TREC": {"A": 85.543, "B": 2.588, "alpha": 1.316, "beta": 0.961, "delta": 0.295, "r2": 0.986},
    "Ettin/MS": {"A": 3.135, "B": 1.266, "alpha": 1.015, "beta": 0.805, "delta": 0.017, "r2": 0.997},
    "Ettin/TREC": {"A": 2.010, "B": 2.444, "alpha": 0.505, "beta": 0.588, "delta": 0.450, "r2": 0.978},
}


def dimension_law(D: Any, A: float, alpha: float, delta: float) -> np.ndarray:
    """Paper eq. 5: ``A / D^α + δ``."""
    return A * np.power(np.asarray(D, dtype=float), -alpha) + delta


def joint_law(D: Any, N: Any, A: float, B: float, alpha: float, beta: float, delta: float) -> np.ndarray:
    """Paper eq. 6: ``A / D^α + B / N^β + δ`` with N in **millions** of parameters."""
    D = np.asarray(D, dtype=float)
    N = np.asarray(N, dtype=float)
    return A * np.power(D, -alpha) + B * np.power(N, -beta) + delta


def r_squared(y: Any, y_hat: Any) -> float:
    """R² = 1 − SS_res / SS_tot (NaN when all y are equal)."""
    y, y_hat = np.asarray(y, dtype=float), np.asarray(y_hat, dtype=float)
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    ss_res = float(np.sum((y - y_hat) ** 2))
    return 1.0 - ss_res / ss_tot if ss_tot > 0 else float("nan")


@dataclass
class DimensionLawFit:
    """Result of :func:`fit_dimension_law`. ``ci`` maps a parameter to its (2.5%, 97.5%) bootstrap interval."""

    A: float
    alpha: float
    delta: float
    r2: float
    n_points: int
    sse: float
    ci: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: the residual-bootstrap refits, one ``(A, alpha, delta)`` row each (empty without ``bootstrap``)
    bootstrap_params: np.ndarray = field(default_factory=lambda: np.empty((0, 3)), repr=False)

    def predict(self, D: Any) -> np.ndarray:
        return dimension_law(D, self.A, self.alpha, self.delta)

    def predict_band(self, D: Any, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
        """Pointwise ``level`` percentile band of the bootstrap refits' curves at ``D`` (needs ``bootstrap`` > 0)."""
        if not len(self.bootstrap_params):
            raise ValueError("no bootstrap refits: fit with bootstrap > 0 to get a band")
        if not 0.0 < level < 1.0:
            raise ValueError(f"level must be in (0, 1), got {level}")
        D = np.asarray(D, dtype=float)
        curves = np.stack([dimension_law(D, A, alpha, delta) for A, alpha, delta in self.bootstrap_params])
        tail = 100.0 * (1.0 - level) / 2.0
        low, high = np.percentile(curves, [tail, 100.0 - tail], axis=0)
        return low, high

    def params(self) -> dict[str, float]:
        return {"A": self.A, "alpha": self.alpha, "delta": self.delta}

    def formula(self) -> str:
        return f"L(D) = {self.A:.4g} / D^{self.alpha:.4g} + {self.delta:.4g}"


@dataclass
class JointLawFit:
    """Result of :func:`fit_joint_law` (N in millions of parameters)."""

    A: float
    B: float
    alpha: float
    beta: float
    delta: float
    r2: float
    n_points: int
    sse: float
    ci: dict[str, tuple[float, float]] = field(default_factory=dict)

    def predict(self, D: Any, N_millions: Any) -> np.ndarray:
        return joint_law(D, N_millions, self.A, self.B, self.alpha, self.beta, self.delta)

    def __call__(self, D: Any, N_millions: Any) -> np.ndarray:
        return self.predict(D, N_millions)

    def params(self) -> dict[str, float]:
        return {"A": self.A, "B": self.B, "alpha": self.alpha, "beta": self.beta, "delta": self.delta}

    def formula(self) -> str:
        return (
            f"L(D, N) = {self.A:.4g} / D^{self.alpha:.4g} + {self.B:.4g} / N^{self.beta:.4g} + {self.delta:.4g}"
            " (N in millions)"
        )


# ------------------------------------------------------------------------------------------------------------------
def _as_points(name: str, values: Any, positive: bool) -> np.ndarray:
    arr = np.asarray(values, dtype=float).ravel()
    if arr.size == 0:
        raise ValueError(f"{name} is empty")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains non-finite values")
    if positive and np.any(arr <= 0):
        raise ValueError(f"{name} must be > 0 (got min {arr.min()})")
    return arr


def _grid_dimension(D: np.ndarray, y: np.ndarray, grid: np.ndarray) -> tuple[float, float, float, float]:
    best = (math.inf, 1.0, 0.0, 0.0)
    for alpha in grid:
        X = np.column_stack([np.power(D, -alpha), np.ones_like(D)])
        coef, rnorm = optimize.nnls(X, y)
        sse = float(rnorm**2)
        if sse < best[0]:
            best = (sse, float(alpha), float(coef[0]), float(coef[1]))
    return best


def _refine(
    fn: Any, x: Any, y: np.ndarray, p0: list[float], lower: list[float], upper: list[float]
) -> np.ndarray | None:
    p0 = np.clip(np.asarray(p0, dtype=float), np.asarray(lower) + 1e-12, np.asarray(upper) - 1e-12)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optimize.OptimizeWarning)
            popt, _ = optimize.curve_fit(
                fn, x, y, p0=p0, bounds=(lower, upper), method="trf", maxfev=20000, ftol=1e-12, xtol=1e-12, gtol=1e-12
            )
        return popt
    except (RuntimeError, ValueError) as exc:
        logger.debug("curve_fit refinement failed from %s: %s", p0, exc)
        return None


def _unit(y: np.ndarray) -> float:
    spread = float(np.ptp(y))
    return spread if spread > 0 else (float(np.max(np.abs(y))) or 1.0)


def _dim_fn(D: np.ndarray, A: float, alpha: float, delta: float) -> np.ndarray:
    return dimension_law(D, A, alpha, delta)


def _fit_dimension_once(
    D: np.ndarray, y: np.ndarray, grid: np.ndarray, p0: Any, allow_negative_delta: bool
) -> tuple[np.ndarray, float]:
    # Work in units of the data's range so curve_fit's (absolute) gradient tolerance does not depend on the loss's
    # scale or offset; A and δ scale back.
    unit = _unit(y)
    if p0 is not None:
        p0 = [p0[0] / unit, p0[1], p0[2] / unit]
    params, sse = _fit_dimension_scaled(D, y / unit, grid, p0, allow_negative_delta)
    return np.array([params[0] * unit, params[1], params[2] * unit]), sse * unit**2


def _fit_dimension_scaled(
    D: np.ndarray, y: np.ndarray, grid: np.ndarray, p0: Any, allow_negative_delta: bool
) -> tuple[np.ndarray, float]:
    if allow_negative_delta:
        best = (math.inf, 1.0, 0.0, 0.0)
        for alpha in grid:
            X = np.column_stack([np.power(D, -alpha), np.ones_like(D)])
            coef, *_ = np.linalg.lstsq(X, y, rcond=None)
            if coef[0] < 0:
                continue
            sse = float(np.sum((X @ coef - y) ** 2))
            if sse < best[0]:
                best = (sse, float(alpha), float(coef[0]), float(coef[1]))
    else:
        best = _grid_dimension(D, y, grid)
    lower = [0.0, 0.0, -np.inf if allow_negative_delta else 0.0]
    upper = [np.inf, _EXPONENT_MAX, np.inf]
    candidates = [np.array([best[2], best[1], best[3]])]
    starts = [[max(best[2], 1e-9), best[1], best[3]]]
    if p0 is not None:
        starts.append(list(p0))
    for start in starts:
        popt = _refine(_dim_fn, D, y, start, lower, upper)
        if popt is not None:
            candidates.append(popt)
    sses = [float(np.sum((_dim_fn(D, *c) - y) ** 2)) for c in candidates]
    i = int(np.argmin(sses))
    return candidates[i], sses[i]


def fit_dimension_law(
    D: Any,
    L: Any,
    p0: tuple[float, float, float] | None = None,
    alpha_grid: Any = None,
    bootstrap: int = 0,
    seed: int = 0,
    allow_negative_delta: bool = False,
) -> DimensionLawFit:
    """Fit ``L(D) = A/D^α + δ`` (paper eq. 5) by grid-over-α variable projection + bounded curve_fit.

    Args:
        D: embedding dimensions (> 0); at least 3 distinct values.
        L: losses (e.g. contrastive entropy), same length.
        p0: optional starting point ``(A, α, δ)``; refined alongside the grid start, the better fit is kept.
        alpha_grid: exponents tried by the grid (default 0.01…4, 250 points).
        bootstrap: number of residual-bootstrap refits for 95% intervals (0: none).
        seed: bootstrap seed.
        allow_negative_delta: let δ go below 0 (default: δ ≥ 0, the paper's "irreducible error").

    Bounds: A ≥ 0, 0 ≤ α ≤ 8, δ ≥ 0.
    """
    D = _as_points("D", D, positive=True)
    y = _as_points("L", L, positive=False)
    if D.shape != y.shape:
        raise ValueError(f"D and L differ in length: {D.size} vs {y.size}")
    if np.unique(D).size < 3:
        raise ValueError(f"need at least 3 distinct dimensions to fit 3 parameters, got {np.unique(D).size}")
    if p0 is not None and len(p0) != 3:
        raise ValueError(f"p0 must be (A, alpha, delta), got {p0!r}")
    grid = np.asarray(DEFAULT_ALPHA_GRID if alpha_grid is None else alpha_grid, dtype=float)
    params, sse = _fit_dimension_once(D, y, grid, p0, allow_negative_delta)
    fit = DimensionLawFit(
        A=float(params[0]),
        alpha=float(params[1]),
        delta=float(params[2]),
        r2=r_squared(y, _dim_fn(D, *params)),
        n_points=int(D.size),
        sse=sse,
    )
    if bootstrap:
        fitted = _dim_fn(D, *params)
        resid = y - fitted
        rng = np.random.default_rng(seed)
        samples = []
        for _ in range(int(bootstrap)):
            y_b = fitted + rng.choice(resid, size=resid.size, replace=True)
            p_b, _ = _fit_dimension_once(D, y_b, grid, None, allow_negative_delta)
            samples.append(p_b)
        fit.bootstrap_params = np.array(samples, dtype=float)
        fit.ci = _intervals(fit.bootstrap_params, ["A", "alpha", "delta"])
    return fit


def _intervals(samples: np.ndarray, names: list[str]) -> dict[str, tuple[float, float]]:
    lo, hi = np.percentile(samples, [2.5, 97.5], axis=0)
    return {n: (float(a), float(b)) for n, a, b in zip(names, lo, hi)}


def _joint_fn(x: tuple[np.ndarray, np.ndarray], A: float, B: float, alpha: float, beta: float, delta: float):
    return joint_law(x[0], x[1], A, B, alpha, beta, delta)


def _fit_joint_once(
    D: np.ndarray, N: np.ndarray, y: np.ndarray, a_grid: np.ndarray, b_grid: np.ndarray, p0: Any
) -> tuple[np.ndarray, float]:
    unit = _unit(y)  # scale-free tolerances, as in _fit_dimension_once
    if p0 is not None:
        p0 = [p0[0] / unit, p0[1] / unit, p0[2], p0[3], p0[4] / unit]
    params, sse = _fit_joint_scaled(D, N, y / unit, a_grid, b_grid, p0)
    return np.array([params[0] * unit, params[1] * unit, params[2], params[3], params[4] * unit]), sse * unit**2


def _fit_joint_scaled(
    D: np.ndarray, N: np.ndarray, y: np.ndarray, a_grid: np.ndarray, b_grid: np.ndarray, p0: Any
) -> tuple[np.ndarray, float]:
    best = (math.inf, 1.0, 1.0, 0.0, 0.0, 0.0)
    Dp = {a: np.power(D, -a) for a in a_grid}
    Np = {b: np.power(N, -b) for b in b_grid}
    ones = np.ones_like(D)
    for alpha in a_grid:
        for beta in b_grid:
            X = np.column_stack([Dp[alpha], Np[beta], ones])
            coef, rnorm = optimize.nnls(X, y)
            sse = float(rnorm**2)
            if sse < best[0]:
                best = (sse, float(alpha), float(beta), float(coef[0]), float(coef[1]), float(coef[2]))
    _, alpha, beta, A, B, delta = best
    lower = [0.0, 0.0, 0.0, 0.0, 0.0]
    upper = [np.inf, np.inf, _EXPONENT_MAX, _EXPONENT_MAX, np.inf]
    candidates = [np.array([A, B, alpha, beta, delta])]
    starts = [[max(A, 1e-9), max(B, 1e-9), alpha, beta, delta]]
    if p0 is not None:
        starts.append(list(p0))
    for start in starts:
        popt = _refine(_joint_fn, (D, N), y, start, lower, upper)
        if popt is not None:
            candidates.append(popt)
    sses = [float(np.sum((_joint_fn((D, N), *c) - y) ** 2)) for c in candidates]
    i = int(np.argmin(sses))
    return candidates[i], sses[i]


def fit_joint_law(
    D: Any,
    N_millions: Any,
    L: Any,
    p0: tuple[float, float, float, float, float] | None = None,
    alpha_grid: Any = None,
    beta_grid: Any = None,
    bootstrap: int = 0,
    seed: int = 0,
) -> JointLawFit:
    """Fit ``L(D, N) = A/D^α + B/N^β + δ`` (paper eq. 6; **N in millions**) over pooled (model, dim) points.

    Grid over (α, β) with a non-negative linear solve for (A, B, δ), then bounded curve_fit refinement (also from
    ``p0 = (A, B, α, β, δ)`` when given). Needs ≥ 2 distinct N and ≥ 2 distinct D and ≥ 5 points. A and α trade off
    against each other (weakly identified); read the bootstrap intervals.
    """
    D = _as_points("D", D, positive=True)
    N = _as_points("N_millions", N_millions, positive=True)
    y = _as_points("L", L, positive=False)
    if not (D.shape == N.shape == y.shape):
        raise ValueError(f"D, N_millions and L differ in length: {D.size}, {N.size}, {y.size}")
    if y.size < 5 or np.unique(D).size < 2 or np.unique(N).size < 2:
        raise ValueError(
            "the joint law has 5 parameters: need at least 5 points with 2+ distinct dimensions and 2+ distinct "
            f"model sizes (got {y.size} points, {np.unique(D).size} dims, {np.unique(N).size} sizes)"
        )
    if np.max(N) > 1e5:
        warnings.warn(
            f"N_millions has values up to {np.max(N):.3g}: N must be in millions of parameters (paper eq. 6); "
            "divide raw parameter counts by 1e6",
            UserWarning,
            stacklevel=2,
        )
    if p0 is not None and len(p0) != 5:
        raise ValueError(f"p0 must be (A, B, alpha, beta, delta), got {p0!r}")
    a_grid = np.asarray(DEFAULT_ALPHA_GRID[::3] if alpha_grid is None else alpha_grid, dtype=float)
    b_grid = np.asarray(DEFAULT_BETA_GRID[::2] if beta_grid is None else beta_grid, dtype=float)
    params, sse = _fit_joint_once(D, N, y, a_grid, b_grid, p0)
    fit = JointLawFit(
        A=float(params[0]),
        B=float(params[1]),
        alpha=float(params[2]),
        beta=float(params[3]),
        delta=float(params[4]),
        r2=r_squared(y, _joint_fn((D, N), *params)),
        n_points=int(y.size),
        sse=sse,
    )
    if bootstrap:
        fitted = _joint_fn((D, N), *params)
        resid = y - fitted
        rng = np.random.default_rng(seed)
        samples = []
        for _ in range(int(bootstrap)):
            y_b = fitted + rng.choice(resid, size=resid.size, replace=True)
            p_b, _ = _fit_joint_once(D, N, y_b, a_grid, b_grid, None)
            samples.append(p_b)
        fit.ci = _intervals(np.array(samples), ["A", "B", "alpha", "beta", "delta"])
    return fit


def extrapolation_check(D: Any, L: Any, n_holdout: int = 1, **fit_kwargs: Any) -> dict[str, Any]:
    """Held-out check of the dimension law (an addition; the paper reports in-sample R² only).

    Fits on all but the ``n_holdout`` largest dimensions and predicts those. Returns the fit, the held-out
    dimensions, their measured and predicted losses, and the relative errors ``(pred − measured)/measured``.
    """
    D = _as_points("D", D, positive=True)
    y = _as_points("L", L, positive=False)
    if D.shape != y.shape:
        raise ValueError(f"D and L differ in length: {D.size} vs {y.size}")
    held = np.sort(np.unique(D))[-int(n_holdout) :] if n_holdout >= 1 else np.array([])
    if held.size == 0:
        raise ValueError(f"n_holdout must be >= 1, got {n_holdout!r}")
    train = ~np.isin(D, held)
    fit = fit_dimension_law(D[train], y[train], **fit_kwargs)
    pred = fit.predict(D[~train])
    measured = y[~train]
    rel = (pred - measured) / np.where(measured != 0, measured, np.nan)
    return {
        "fit": fit,
        "dims": D[~train].tolist(),
        "measured": measured.tolist(),
        "predicted": pred.tolist(),
        "relative_error": rel.tolist(),
    }
