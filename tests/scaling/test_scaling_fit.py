"""Law fits recover the paper's constants from synthetic data, from bad starting points."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import r2_score

from st_magnitude.scaling.fit import (
    PAPER_DIMENSION_LAWS,
    PAPER_JOINT_LAWS,
    dimension_law,
    fit_dimension_law,
    fit_joint_law,
    joint_law,
    r_squared,
)

DIMS = 32 * 2.0 ** np.arange(9)  # 32 … 8192, the paper's BERT-L8-H512 range
BAD_STARTS = [(1.0, 1.0, 1.0), (1e4, 6.0, 10.0), (1e-3, 0.01, 0.0)]  # (1,1,1) is curve_fit's failing default


@pytest.mark.parametrize("name", sorted(PAPER_DIMENSION_LAWS))
@pytest.mark.parametrize("p0", BAD_STARTS)
def test_dimension_fit_recovers_paper_constants_noiseless(name, p0):
    """Tolerance: 0.5% relative on A, α, δ (noise-free data generated with the paper's Table 1 constants)."""
    true = PAPER_DIMENSION_LAWS[name]
    y = dimension_law(DIMS, true["A"], true["alpha"], true["delta"])
    fit = fit_dimension_law(DIMS, y, p0=p0)
    assert fit.A == pytest.approx(true["A"], rel=5e-3)
    assert fit.alpha == pytest.approx(true["alpha"], rel=5e-3)
    assert fit.delta == pytest.approx(true["delta"], rel=5e-3)
    assert fit.r2 > 0.99999


@pytest.mark.parametrize("name", ["BERT-L8-H512-A8/TREC", "BERT-L2-H128-A2/MS", "Ettin-L19-H512-A8/TREC"])
def test_dimension_fit_with_noise(name):
    """1% multiplicative noise, 9 dims: α within 5%, δ within 3%, A within 25% (A and α trade off)."""
    true = PAPER_DIMENSION_LAWS[name]
    rng = np.random.default_rng(0)
    y = dimension_law(DIMS, true["A"], true["alpha"], true["delta"]) * (1 + 0.01 * rng.standard_normal(DIMS.size))
    fit = fit_dimension_law(DIMS, y, p0=(1.0, 1.0, 1.0), bootstrap=60, seed=0)
    assert fit.alpha == pytest.approx(true["alpha"], rel=0.05)
    assert fit.delta == pytest.approx(true["delta"], rel=0.03)
    assert fit.A == pytest.approx(true["A"], rel=0.25)
    lo, hi = fit.ci["alpha"]
    assert lo <= fit.alpha <= hi
    assert fit.r2 > 0.99


def test_paper_test_vectors():
    """Digest 003 §6.6: L(64) / L(256) / L(1024) for BERT-L8-H512-A8 (MS, TREC) and the joint laws."""
    ms, trec = PAPER_DIMENSION_LAWS["BERT-L8-H512-A8/MS"], PAPER_DIMENSION_LAWS["BERT-L8-H512-A8/TREC"]
    np.testing.assert_allclose(dimension_law([64, 256, 1024], ms["A"], ms["alpha"], ms["delta"]),
                               [0.0606, 0.0272, 0.0243], atol=6e-5)  # fmt: skip
    np.testing.assert_allclose(dimension_law([64, 256, 1024], trec["A"], trec["alpha"], trec["delta"]),
                               [0.6780, 0.3843, 0.3466], atol=6e-5)  # fmt: skip
    expected = {"BERT/MS": 0.0704, "BERT/TREC": 0.7224, "Ettin/MS": 0.2381, "Ettin/TREC": 1.2545}
    for key, value in expected.items():
        p = PAPER_JOINT_LAWS[key]
        assert float(joint_law(128, 10, p["A"], p["B"], p["alpha"], p["beta"], p["delta"])) == pytest.approx(
            value, abs=6e-5
        )


@pytest.mark.parametrize("name", sorted(PAPER_JOINT_LAWS))
def test_joint_fit_recovers_paper_constants(name):
    """Noise-free grid of the paper's 7 BERT sizes × 8 dims, bad start p0 = 1: every parameter within 2%."""
    true = PAPER_JOINT_LAWS[name]
    Ns = np.array([4.39, 6.37, 11.17, 28.76, 38.60, 41.37, 109.48])
    D, N = (a.ravel() for a in np.meshgrid(32 * 2.0 ** np.arange(8), Ns))
    y = joint_law(D, N, true["A"], true["B"], true["alpha"], true["beta"], true["delta"])
    fit = fit_joint_law(D, N, y, p0=(1, 1, 1, 1, 1))
    for key in ("A", "B", "alpha", "beta", "delta"):
        assert getattr(fit, key) == pytest.approx(true[key], rel=0.02), key
    assert fit.r2 > 0.9999
    np.testing.assert_allclose(fit(D, N), y, rtol=1e-3)


def test_r_squared_matches_sklearn():
    rng = np.random.default_rng(1)
    y, y_hat = rng.random(12), rng.random(12)
    assert r_squared(y, y_hat) == pytest.approx(r2_score(y, y_hat), rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(A=st.floats(0.05, 500), alpha=st.floats(0.3, 2.5), delta=st.floats(0.0, 2.0))
def test_fit_never_worse_than_truth(A, alpha, delta):
    """Property: on noise-free data the fitted curve reproduces the data (SSE ~ 0 relative to the signal)."""
    y = dimension_law(DIMS, A, alpha, delta)
    fit = fit_dimension_law(DIMS, y)
    scale = float(np.sum((y - y.mean()) ** 2)) + 1e-300
    assert fit.sse / scale < 1e-6


def test_input_errors():
    with pytest.raises(ValueError, match="3 distinct"):
        fit_dimension_law([64, 64, 128], [1, 1, 0.5])
    with pytest.raises(ValueError, match="must be > 0"):
        fit_dimension_law([0, 64, 128], [1, 1, 0.5])
    with pytest.raises(ValueError, match="non-finite"):
        fit_dimension_law([32, 64, 128], [1, np.nan, 0.5])
    with pytest.raises(ValueError, match="differ in length"):
        fit_dimension_law([32, 64, 128], [1, 0.5])
    with pytest.raises(ValueError, match="distinct model sizes"):
        fit_joint_law([32, 64, 128, 256, 512], [10] * 5, [1, 0.8, 0.6, 0.5, 0.45])
    with pytest.warns(UserWarning, match="millions"):
        fit_joint_law([32, 64, 128, 32, 64, 128], [4e6] * 3 + [1e8] * 3, [1, 0.8, 0.6, 0.9, 0.7, 0.5])


def test_extrapolation_check_exact_law_and_errors():
    from st_magnitude.scaling.fit import extrapolation_check

    true = PAPER_DIMENSION_LAWS["Ettin-L19-H512-A8/TREC"]
    y = dimension_law(DIMS, true["A"], true["alpha"], true["delta"])
    check = extrapolation_check(DIMS, y, n_holdout=2)
    assert check["dims"] == [4096.0, 8192.0]
    np.testing.assert_allclose(check["relative_error"], 0.0, atol=1e-4)
    with pytest.raises(ValueError, match="n_holdout"):
        extrapolation_check(DIMS, y, n_holdout=0)
    with pytest.raises(ValueError, match="3 distinct"):
        extrapolation_check(DIMS[:4], y[:4], n_holdout=2)
