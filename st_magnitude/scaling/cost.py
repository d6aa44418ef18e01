"""Cost-aware choice of model size N and embedding dimension D (paper 003 §4.5).

One query is encoded and scored against M precomputed document vectors under a FLOPs budget B per query::

    C_enc(N, T)   ≈ 2·N·T                       (encoder forward pass; projection FLOPs ignored, as the paper)
    C_score(M, D) ≈ 2·M·D                        exhaustive scoring
                  ≈ 2·D·ln(M)                    ANN (illustrative; the paper leaves the log base open → natural log)
    C_enc = γB,  C_score = (1 − γ)B
    ⇒ N(γ) = γB / (2T),   D(γ) = (1 − γ)B / (2M)   (or (1 − γ)B / (2 ln M) for ANN)
    γ̂ = argmin_γ L̂(D(γ), N(γ)),  with N converted to **millions** before evaluating the joint law.

Paper setting: T = 32, M ∈ {1e5, 1e6, 1e7}, joint law BERT/TREC (Table 2). Storage (not in the paper):
``index_bytes = M·D·bytes_per_value``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

SCORING_MODES: tuple[str, ...] = ("exhaustive", "ann")


def _check_mode(scoring: str) -> str:
    if scoring not in SCORING_MODES:
        raise ValueError(f"Unknown scoring {scoring!r}. Valid values: {', '.join(SCORING_MODES)}.")
    return scoring


def _check_positive(**values: float) -> None:
    for name, v in values.items():
        if not (isinstance(v, (int, float, np.floating, np.integer)) and math.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be a positive finite number, got {v!r}")


def encoding_flops(N: float, T: float) -> float:
    """C_enc ≈ 2·N·T (N raw parameters, T query tokens)."""
    _check_positive(N=N, T=T)
    return 2.0 * N * T


def scoring_flops(D: float, M: float, scoring: str = "exhaustive") -> float:
    """C_score ≈ 2·M·D (exhaustive) or 2·D·ln M (ANN)."""
    _check_positive(D=D, M=M)
    if _check_mode(scoring) == "exhaustive":
        return 2.0 * M * D
    if M <= 1:
        raise ValueError(f"ANN cost 2·D·ln(M) needs M > 1, got {M!r}")
    return 2.0 * D * math.log(M)


def allocate(budget: float, gamma: Any, T: float = 32, M: float = 1e7, scoring: str = "exhaustive"):
    """Split the budget: ``N(γ) = γB/(2T)`` raw parameters and ``D(γ) = (1−γ)B/(2M)`` (or ``/(2 ln M)``)."""
    _check_positive(budget=budget, T=T, M=M)
    gamma = np.asarray(gamma, dtype=float)
    if np.any((gamma <= 0) | (gamma >= 1)):
        raise ValueError("gamma must lie in the open interval (0, 1)")
    per_dim = 2.0 * M if _check_mode(scoring) == "exhaustive" else 2.0 * math.log(M)
    return gamma * budget / (2.0 * T), (1.0 - gamma) * budget / per_dim


def index_bytes(M: float, D: float, bytes_per_value: float = 4) -> float:
    """Index size ``M·D·bytes_per_value`` (4 for fp32, 2 for fp16/bf16, 1 for int8). Not in the paper."""
    _check_positive(M=M, D=D, bytes_per_value=bytes_per_value)
    return float(M) * float(D) * float(bytes_per_value)


@dataclass
class Allocation:
    """Optimum of :func:`optimal_allocation`: γ̂, N̂ (raw and millions), D̂ and the predicted loss."""

    gamma: float
    N: float
    N_millions: float
    D: float
    loss: float
    budget: float
    scoring: str
    M: float
    T: float


def _law_callable(law: Any) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    if isinstance(law, dict):
        from st_magnitude.scaling.fit import joint_law

        missing = {"A", "B", "alpha", "beta", "delta"} - set(law)
        if missing:
            raise ValueError(f"law dict needs keys A, B, alpha, beta, delta; missing {sorted(missing)}")
        return lambda D, N: joint_law(D, N, law["A"], law["B"], law["alpha"], law["beta"], law["delta"])
    if callable(law):
        return law
    raise ValueError("law must be a JointLawFit, a callable L(D, N_millions) or a dict of joint-law parameters")


def optimal_allocation(
    law: Any,
    budget: float,
    T: float = 32,
    M: float = 1e7,
    scoring: str = "exhaustive",
    n_gamma: int = 200_000,
    d_range: tuple[float, float] | None = None,
    n_range_millions: tuple[float, float] | None = None,
) -> Allocation:
    """γ̂ = argmin over a γ grid in (0, 1) of L̂(D(γ), N(γ)/1e6) (paper §4.5).

    Args:
        law: a :class:`~st_magnitude.scaling.fit.JointLawFit`, a callable ``L(D, N_millions)`` or a dict with
            A, B, alpha, beta, delta (e.g. ``PAPER_JOINT_LAWS["BERT/TREC"]``).
        budget: FLOPs per query B.
        T: query length in tokens (paper: 32).
        M: number of indexed documents.
        scoring: ``"exhaustive"`` or ``"ann"``.
        n_gamma: grid size.
        d_range / n_range_millions: optional feasible ranges (e.g. the fitted range; the laws extrapolate poorly).
    """
    fn = _law_callable(law)
    gamma = np.linspace(0.0, 1.0, int(n_gamma) + 2)[1:-1]
    N, D = allocate(budget, gamma, T, M, scoring)
    N_m = N / 1e6
    mask = np.ones_like(gamma, dtype=bool)
    if d_range is not None:
        mask &= (D >= d_range[0]) & (D <= d_range[1])
    if n_range_millions is not None:
        mask &= (N_m >= n_range_millions[0]) & (N_m <= n_range_millions[1])
    if not mask.any():
        raise ValueError("no γ gives a (D, N) inside d_range / n_range_millions for this budget")
    loss = np.where(mask, fn(D, N_m), np.inf)
    i = int(np.argmin(loss))
    return Allocation(
        gamma=float(gamma[i]),
        N=float(N[i]),
        N_millions=float(N_m[i]),
        D=float(D[i]),
        loss=float(loss[i]),
        budget=float(budget),
        scoring=scoring,
        M=float(M),
        T=float(T),
    )


def budget_curve(
    law: Any, budget: float, dims: Any, T: float = 32, M: float = 1e7, scoring: str = "exhaustive"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fixed budget, swept D: ``N = (B − C_score(D)) / (2T)``; returns (D, N_millions, L̂), NaN where infeasible.

    This is the curve of paper Fig. 8: L̂ falls with D, reaches an optimum, then rises as scoring eats the encoder
    budget.
    """
    fn = _law_callable(law)
    _check_positive(budget=budget, T=T, M=M)
    dims = np.asarray(dims, dtype=float)
    per_dim = 2.0 * M if _check_mode(scoring) == "exhaustive" else 2.0 * math.log(M)
    N = (budget - per_dim * dims) / (2.0 * T)
    N_m = N / 1e6
    feasible = N > 0
    loss = np.full(dims.shape, np.nan)
    loss[feasible] = fn(dims[feasible], N_m[feasible])
    return dims, np.where(feasible, N_m, np.nan), loss
