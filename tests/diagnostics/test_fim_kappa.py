"""Component FIM (paper 000 Table 2 formulas) and the κ(F_qnorm) vs κ(F_dnorm) rule."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from st_magnitude.diagnostics import component_fim_table, recommend_normalization
from st_magnitude.diagnostics.fim import (
    KAPPA_MIN_PAIRS_PER_DIM,
    component_fim,
    condition_number,
    fisher_matrix,
    kappa_min_pairs,
    pair_gradients,
)
from st_magnitude.similarity import get_similarity


def _pairs(seed=0, n=50, dim=6):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(n, dim, generator=g, dtype=torch.float64) * (1 + 3 * torch.rand(n, 1, generator=g))
    d = torch.randn(n, dim, generator=g, dtype=torch.float64) * (1 + 3 * torch.rand(n, 1, generator=g))
    return q, d


@settings(max_examples=20, deadline=None)
@given(gq=st.floats(0, 1), gd=st.floats(0, 1), seed=st.integers(0, 100))
def test_component_fim_matches_autograd_of_polar_form(gq, gd, seed):
    # Independent reference: s(r_q, r_d, θ) = r_q^(1-γq) r_d^(1-γd) cos θ differentiated by autograd
    q, d = _pairs(seed, n=20)
    rq = torch.linalg.vector_norm(q, dim=-1).requires_grad_()
    rd = torch.linalg.vector_norm(d, dim=-1).requires_grad_()
    theta = torch.arccos(((q * d).sum(-1) / (rq * rd)).detach().clamp(-1, 1)).requires_grad_()
    s = rq ** (1 - gq) * rd ** (1 - gd) * torch.cos(theta)
    g_rq, g_rd, g_th = torch.autograd.grad(s.sum(), [rq, rd, theta])
    got = component_fim(q, d, gq, gd)
    assert got["doc_mag"] == pytest.approx(float((g_rd**2).mean()), rel=1e-6, abs=1e-12)
    assert got["query_mag"] == pytest.approx(float((g_rq**2).mean()), rel=1e-6, abs=1e-12)
    assert got["angular"] == pytest.approx(float((g_th**2).mean()), rel=1e-6, abs=1e-12)


def test_table2_structural_zeros_and_closed_forms():
    q, d = _pairs(1)
    t = component_fim_table(q, d)
    # Table 2: exact zeros print as -20 (cosine: both magnitudes; qnorm: query; dnorm: document)
    assert t["cosine"]["doc_mag"] == t["cosine"]["query_mag"] == -20.0
    assert t["qnorm"]["query_mag"] == -20.0 and t["dnorm"]["doc_mag"] == -20.0
    nq, nd = q.norm(dim=-1), d.norm(dim=-1)
    cos = (q * d).sum(-1) / (nq * nd)
    # Dot: ∂s/∂‖d‖ = ‖q‖ cos θ;  QNorm: ∂s/∂‖d‖ = cos θ;  Cosine: ∂s/∂θ = −sin θ
    assert t["dot"]["doc_mag"] == pytest.approx(math.log10(float(((nq * cos) ** 2).mean())))
    assert t["qnorm"]["doc_mag"] == pytest.approx(math.log10(float((cos**2).mean())))
    assert t["cosine"]["angular"] == pytest.approx(math.log10(float((1 - cos**2).mean())))


@pytest.mark.parametrize("variant", ["qnorm", "dnorm"])
def test_pair_gradients_equal_autograd_of_the_similarity(variant):
    # the gradient of s w.r.t. [q; d] (Lemma M.1/M.2) against autograd through st_magnitude.similarity
    q, d = _pairs(2, n=7)
    q.requires_grad_(True)
    d.requires_grad_(True)
    s = get_similarity(variant).pairwise(q, d)
    gq, gd = torch.autograd.grad(s.sum(), [q, d])
    torch.testing.assert_close(pair_gradients(q.detach(), d.detach(), variant), torch.cat([gq, gd], -1))


def test_condition_number_on_known_spectrum_and_tolerance():
    f = torch.diag(torch.tensor([10.0, 2.0, 0.5, 0.0], dtype=torch.float64))
    kappa, rank = condition_number(f)
    assert kappa == pytest.approx(20.0) and rank == 3  # the exact zero is dropped by the relative tolerance
    kappa_d, rank_d = condition_number(f, damping=0.01)
    assert kappa_d == pytest.approx(10.1 / 0.1) and rank_d == 4
    with pytest.raises(ValueError, match="Fisher matrix is zero"):
        condition_number(torch.zeros(3, 3))


def test_weighted_fisher_equals_resampled_rows():
    q, d = _pairs(3, n=12)
    g = pair_gradients(q, d, "qnorm")
    idx = torch.tensor([0, 0, 3, 5, 5, 5, 11])
    w = torch.bincount(idx, minlength=12).double()
    torch.testing.assert_close(fisher_matrix(g, w), fisher_matrix(g[idx]))


def test_recommendation_is_reproducible_with_interval_around_the_estimate():
    q, d = _pairs(4, n=40, dim=5)  # 40 >= 8n = 40
    a = recommend_normalization(q, d, n_bootstrap=30, seed=1)
    b = recommend_normalization(q, d, n_bootstrap=30, seed=1)
    assert a == b
    assert a.ci_low <= a.ci_high and a.damping == 0.0 and a.n_resamples == 30 and a.subsample_size == 20
    assert a.confident == ((a.ci_high < 0 and a.delta < 0) or (a.ci_low > 0 and a.delta > 0))
    assert a.recommendation == (("qnorm" if a.delta < 0 else "dnorm") if a.confident else "inconclusive")
    assert a.delta == pytest.approx(a.log10_kappa_qnorm - a.log10_kappa_dnorm)


def test_too_few_pairs_get_damping(caplog):
    q, d = _pairs(5, n=6, dim=5)  # 6 < 2n = 10: rank-deficient
    res = recommend_normalization(q, d, n_bootstrap=0)
    assert res.damping > 0 and "rank-deficient" in caplog.text


def _skewed_pairs(seed, n, dim):
    """Pairs whose document norms spread over two decades: Δ = log10 κ(qnorm) − log10 κ(dnorm) is far from 0."""
    q, d = _pairs(seed, n=n, dim=dim)
    g = torch.Generator().manual_seed(seed + 1000)
    return q, d * 10 ** (2 * torch.rand(n, 1, generator=g, dtype=torch.float64))


def test_minimum_pair_budget_is_8n():
    assert KAPPA_MIN_PAIRS_PER_DIM == 8
    assert kappa_min_pairs(384) == 3072 and kappa_min_pairs(768) == 6144 and kappa_min_pairs(1024) == 8192
    q, d = _pairs(7, n=60, dim=5)
    with pytest.raises(ValueError, match="min_pairs must be >= 8n = 40"):
        recommend_normalization(q, d, min_pairs=39)
    with pytest.raises(ValueError, match="n_bootstrap"):
        recommend_normalization(q, d, n_bootstrap=-1)


@pytest.mark.parametrize("n_pairs", [12, 20, 39])  # below 2n (damped, log10 κ ≈ 6 on both sides) and 2n ≤ N < 8n
def test_below_the_minimum_the_verdict_is_inconclusive(n_pairs):
    # At N < 2n damping once made both log10 κ ≈ 6.0000004 and the old bootstrap (with replacement,
    # ≈ 0.63·N distinct pairs per resample) still printed "confident"; just above 2n the sign was noise.
    q, d = _skewed_pairs(8, n=n_pairs, dim=5)  # 8n = 40
    res = recommend_normalization(q, d, n_bootstrap=50, seed=0)
    assert res.verdict == "inconclusive" and not res.confident and res.recommendation == "inconclusive"
    assert "below the minimum 40" in res.reason and res.min_pairs == 40
    assert res.ci_low is None and res.n_resamples == 0  # no replicate below the minimum is ever formed
    assert "confident" not in res.summary() and "inconclusive, no recommendation" in res.summary()
    # why and what to do, without the meaningless (damped) condition numbers
    assert f"needs >= 40 (query, relevant document) pairs (8n for n = 5 dimensions); got {n_pairs}" in res.summary()
    assert "--n-pairs" in res.summary() and "log10 κ" not in res.summary()


def test_damped_fisher_below_2n_is_never_confident():
    # the symptom in miniature: N = 48 < 2n = 64, damping makes both log10 κ = 6.0000 and Δ ≈ 0 is
    # rounding noise; the old bootstrap called it "recommend qnorm ... confident"
    q, d = _skewed_pairs(8, n=48, dim=32)
    res = recommend_normalization(q, d, n_bootstrap=50, seed=0)
    assert res.damping > 0 and abs(res.delta) < 1e-5
    assert res.log10_kappa_qnorm == pytest.approx(6.0, abs=1e-4) and res.log10_kappa_dnorm == pytest.approx(
        6.0, abs=1e-4
    )
    assert not res.confident and res.recommendation == "inconclusive" and "confident" not in res.summary()


def test_replicates_are_half_samples_of_distinct_pairs(monkeypatch):
    # every replicate F is the plain mean over ⌊N/2⌋ *distinct* pairs (≥ 4n), never multinomial bootstrap weights
    import st_magnitude.diagnostics.fim as fim

    calls = []
    real = fim.fisher_matrix

    def spy(grads, weights=None):
        calls.append((grads.shape[0], weights, torch.unique(grads, dim=0).shape[0]))
        return real(grads, weights)

    monkeypatch.setattr(fim, "fisher_matrix", spy)
    q, d = _skewed_pairs(9, n=81, dim=5)
    res = fim.recommend_normalization(q, d, n_bootstrap=7, seed=3)
    assert len(calls) == 2 + 2 * 7 and calls[0][0] == calls[1][0] == 81
    for rows, weights, distinct in calls[2:]:
        assert weights is None and rows == distinct == 40 >= 4 * 5
    assert res.subsample_size == 40 and len(res.replicate_deltas) == res.n_resamples == 7


def test_confident_when_enough_pairs_and_the_interval_excludes_zero():
    q, d = _skewed_pairs(10, n=400, dim=4)  # 400 ≥ 8n = 32
    a = recommend_normalization(q, d, n_bootstrap=60, seed=0)
    b = recommend_normalization(d, q, n_bootstrap=60, seed=0)  # swapped roles: the other side
    for r in (a, b):
        assert r.verdict == "confident" and r.confident and r.reason == ""
        assert r.recommendation == ("qnorm" if r.delta < 0 else "dnorm")
        assert (r.ci_high < 0) if r.delta < 0 else (r.ci_low > 0)
        assert "confident" in r.summary() and f"recommend {r.recommendation}" in r.summary()
    assert a.recommendation != b.recommendation


def test_interval_containing_zero_is_inconclusive():
    # exchangeable roles ((q, d) and (d, q) equally likely): F_qnorm and F_dnorm have the same population spectrum
    # (block permutation), so the population Δ is 0 and a valid interval contains it
    g = torch.Generator().manual_seed(11)
    q, d = (torch.nn.functional.normalize(torch.randn(400, 3, generator=g, dtype=torch.float64), dim=-1) for _ in "qd")
    q = q * (1 + torch.rand(400, 1, generator=g, dtype=torch.float64))
    d = d * (1 + torch.rand(400, 1, generator=g, dtype=torch.float64))
    res = recommend_normalization(q, d, n_bootstrap=60, seed=0)
    assert res.ci_low <= 0 <= res.ci_high
    assert res.verdict == "inconclusive" and res.reason == "the interval contains 0"
    assert res.recommendation == "inconclusive" and "confident" not in res.summary()


def _bounded_pairs(seed, n, dim):
    """Queries of norm 1–2, documents = query + noise with norms spread 0.5–2.5 (no heavy-tailed 1/‖·‖ factors)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.nn.functional.normalize(torch.randn(n, dim, generator=g, dtype=torch.float64), dim=-1)
    q = q * (1 + torch.rand(n, 1, generator=g, dtype=torch.float64))
    d = q + 0.7 * torch.randn(n, dim, generator=g, dtype=torch.float64)
    return q, d * (0.5 + 2 * torch.rand(n, 1, generator=g, dtype=torch.float64))


def test_half_sampling_interval_has_the_full_sample_spread_and_coverage():
    # Independent Monte Carlo check of the half-sampling claim (finite population correction 1 − m/N = 1/2): the
    # spread of one sample's replicate Δs matches the spread of Δ over 60 fresh samples of N pairs, and the 90 %
    # interval covers the mean Δ at this N (the sampling target) in about 90 % of the samples.
    dim, n, reps, sims = 4, 128, 40, 60  # N = 32n
    runs = [
        recommend_normalization(*_bounded_pairs(100 + s, n, dim), n_bootstrap=reps, confidence=0.9, seed=s)
        for s in range(sims)
    ]
    fresh = np.array([r.delta for r in runs])
    ratio = float(np.median([np.std(r.replicate_deltas) for r in runs])) / float(fresh.std())
    assert 0.7 < ratio < 1.5, ratio
    covered = np.mean([r.ci_low <= fresh.mean() <= r.ci_high for r in runs])
    assert covered >= 0.8, covered
    assert all(r.ci_low <= r.delta <= r.ci_high for r in runs)  # centred on the full-sample estimate


def test_swapping_roles_swaps_the_recommendation():
    # [∂s/∂q; ∂s/∂d] of qnorm on (q, d) is a block permutation of dnorm's on (d, q): same spectrum, so
    # Δ(q, d) = −Δ(d, q) and the side Δ points to flips (unless Δ = 0).
    q, d = _pairs(6, n=40, dim=5)
    d = d * torch.linspace(0.1, 10, 40, dtype=torch.float64)[:, None]
    a = recommend_normalization(q, d, n_bootstrap=0)
    b = recommend_normalization(d, q, n_bootstrap=0)
    assert a.delta == pytest.approx(-b.delta, abs=1e-9)
    assert a.delta != 0 and a.lean != b.lean
    assert a.recommendation == b.recommendation == "inconclusive" and a.reason == "no interval (n_bootstrap = 0)"


def test_input_validation():
    with pytest.raises(ValueError, match="pair matrices"):
        component_fim(torch.randn(3, 4), torch.randn(2, 4), 1, 0)
    with pytest.raises(ValueError, match="variant must be 'qnorm' or 'dnorm'"):
        pair_gradients(torch.randn(3, 4), torch.randn(3, 4), "cosine")
    with pytest.raises(ValueError, match="gamma_query must lie in"):
        component_fim(torch.randn(3, 4), torch.randn(3, 4), 2, 0)


@pytest.mark.slow
def test_kappa_rule_on_minilm_below_and_at_the_minimum(minilm_dir, beir_dir):
    # all-MiniLM-L6-v2 (n = 384), 64 tokens. 800 SciFact train pairs (≥ 2n, < 8n): full-rank F, but inconclusive
    # with no interval. 8n = 3072 NFCorpus train pairs, seed 42, 20 half-samples (compare --quick's κ step):
    # qnorm, confident — the numbers in README "Results" and docs/diagnostics.md.
    from st_magnitude.diagnostics import run_kappa
    from st_magnitude.model.load import load_model

    torch.set_num_threads(2)
    model = load_model(str(minilm_dir), max_seq_length=64)
    res, seconds, source = run_kappa(model, [beir_dir / "scifact"], n_pairs=800, n_bootstrap=10)
    assert res.n_pairs == 800 and res.dim == 384 and res.damping == 0.0 and "scifact/train" in source
    assert res.rank_qnorm > 700 and res.rank_dnorm > 700 and math.isfinite(res.delta)
    assert res.verdict == "inconclusive" and res.ci_low is None and res.min_pairs == 3072
    res, seconds, source = run_kappa(model, [beir_dir / "nfcorpus"], n_bootstrap=20, seed=42)
    assert res.n_pairs == 3072 and res.subsample_size == 1536
    assert res.verdict == "confident" and res.recommendation == "qnorm"
    assert res.delta == pytest.approx(-0.0336, abs=2e-3) and res.ci_high < 0
