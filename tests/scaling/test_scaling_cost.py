"""Cost-aware allocation (paper 003 §4.5) against the closed forms and a worked optimum table."""

from __future__ import annotations

import math

import numpy as np
import pytest

from st_magnitude.scaling.cost import (
    allocate,
    budget_curve,
    encoding_flops,
    index_bytes,
    optimal_allocation,
    scoring_flops,
)
from st_magnitude.scaling.fit import PAPER_JOINT_LAWS, JointLawFit

LAW = PAPER_JOINT_LAWS["BERT/TREC"]

# worked optima (paper 003 §4.5 closed forms): (scoring, M, B) -> (γ̂, N̂ in M params, D̂, L̂)
TABLE = [
    ("exhaustive", 1e5, 1e9, 0.8843, 13.82, 578.4, 0.5223),
    ("exhaustive", 1e6, 1e9, 0.6641, 10.38, 167.9, 0.6691),
    ("exhaustive", 1e7, 1e9, 0.3237, 5.06, 33.8, 1.6716),
    ("exhaustive", 1e5, 1e10, 0.9162, 143.16, 4187.7, 0.3184),
    ("exhaustive", 1e6, 1e10, 0.7411, 115.79, 1294.7, 0.3288),
    ("exhaustive", 1e7, 1e10, 0.4144, 64.74, 292.8, 0.3906),
    ("exhaustive", 1e7, 1e11, 0.5097, 796.36, 2451.6, 0.3022),
    ("ann", 1e7, 1e9, 0.9991, 15.61, 27914, 0.4797),
    ("ann", 1e7, 1e10, 0.9994, 156.15, 195400, 0.3152),
]


@pytest.mark.parametrize(("scoring", "M", "B", "gamma", "n_m", "d", "loss"), TABLE)
def test_worked_optimum_table(scoring, M, B, gamma, n_m, d, loss):
    a = optimal_allocation(LAW, B, T=32, M=M, scoring=scoring)
    assert a.loss == pytest.approx(loss, abs=1e-4)
    assert a.gamma == pytest.approx(gamma, abs=2e-4)
    assert a.N_millions == pytest.approx(n_m, rel=2e-3)
    assert a.D == pytest.approx(d, rel=2e-3 if scoring == "exhaustive" else 2e-2)  # ANN optimum is very flat


def test_allocation_spends_exactly_the_budget():
    for scoring, M in (("exhaustive", 1e6), ("ann", 1e6)):
        N, D = allocate(1e10, 0.3, T=32, M=M, scoring=scoring)
        assert encoding_flops(N, 32) + scoring_flops(D, M, scoring) == pytest.approx(1e10, rel=1e-12)
    assert scoring_flops(10, math.e**3, "ann") == pytest.approx(60.0)


def test_qualitative_claims():
    """Paper §4.5: D̂ falls as M grows; N̂ and D̂ grow together with B; ANN D̂ far above exhaustive D̂."""
    d = [optimal_allocation(LAW, 1e10, M=M, n_gamma=20000).D for M in (1e5, 1e6, 1e7)]
    assert d[0] > d[1] > d[2]
    small, big = (optimal_allocation(LAW, B, M=1e6, n_gamma=20000) for B in (1e9, 1e11))
    assert big.D > small.D and big.N > small.N
    assert optimal_allocation(LAW, 1e10, scoring="ann", n_gamma=20000).D > 100 * d[2]


def test_fit_object_and_ranges():
    fit = JointLawFit(r2=1.0, n_points=0, sse=0.0, **{k: LAW[k] for k in ("A", "B", "alpha", "beta", "delta")})
    a = optimal_allocation(fit, 1e10, M=1e7, n_gamma=20000)
    assert a.loss == pytest.approx(0.3906, abs=2e-4)
    clipped = optimal_allocation(LAW, 1e10, M=1e5, d_range=(32, 2048), n_gamma=20000)
    assert clipped.D <= 2048 and clipped.loss >= optimal_allocation(LAW, 1e10, M=1e5, n_gamma=20000).loss
    with pytest.raises(ValueError, match="no γ"):
        optimal_allocation(LAW, 1e9, M=1e7, d_range=(1e6, 2e6), n_gamma=1000)


def test_budget_curve_has_interior_optimum_and_infeasible_tail():
    dims = np.geomspace(8, 4096, 200)
    d, n_m, loss = budget_curve(LAW, 1e9, dims, M=1e6)
    feasible = ~np.isnan(loss)
    assert feasible.any() and (~feasible).any()  # large D eats the whole budget
    i = int(np.nanargmin(loss))
    assert 0 < i < feasible.sum() - 1
    np.testing.assert_allclose(n_m[feasible], (1e9 - 2 * 1e6 * d[feasible]) / 64 / 1e6)


def test_index_bytes_and_errors():
    assert index_bytes(8_841_823, 768) / 1e9 == pytest.approx(27.16, abs=0.01)  # MS MARCO: 8.84M × 768 fp32
    with pytest.raises(ValueError, match="exhaustive, ann"):
        scoring_flops(10, 100, "hnsw")
    with pytest.raises(ValueError, match="open interval"):
        allocate(1e9, 1.0)
    with pytest.raises(ValueError, match="positive finite"):
        encoding_flops(-1, 32)
    with pytest.raises(ValueError, match="missing"):
        optimal_allocation({"A": 1.0}, 1e9)
