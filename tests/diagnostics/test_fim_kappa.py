"""Component FIM (paper 000 Table 2 formulas) and the κ(F_qnorm) vs κ(F_dnorm) rule (digest 000 §5.2)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from st_magnitude.diagnostics import (
    component_fim,
    component_fim_table,
    condition_number,
    fisher_matrix,
    pair_gradients,
    recommend_normalization,
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
    q, d = _pairs(4, n=40, dim=5)  # 40 >= 2n = 10
    a = recommend_normalization(q, d, n_bootstrap=30, seed=1)
    b = recommend_normalization(q, d, n_bootstrap=30, seed=1)
    assert a == b
    assert a.recommendation == ("qnorm" if a.delta < 0 else "dnorm")
    assert a.ci_low <= a.ci_high and a.damping == 0.0
    assert a.confident == (a.ci_high < 0 or a.ci_low > 0)
    assert a.delta == pytest.approx(a.log10_kappa_qnorm - a.log10_kappa_dnorm)


def test_too_few_pairs_get_damping(caplog):
    q, d = _pairs(5, n=6, dim=5)  # 6 < 2n = 10: rank-deficient
    res = recommend_normalization(q, d, n_bootstrap=0)
    assert res.damping > 0 and "rank-deficient" in caplog.text


def test_swapping_roles_swaps_the_recommendation():
    # [∂s/∂q; ∂s/∂d] of qnorm on (q, d) is a block permutation of dnorm's on (d, q): same spectrum, so
    # Δ(q, d) = −Δ(d, q) and the recommendation flips (unless Δ = 0).
    q, d = _pairs(6, n=40, dim=5)
    d = d * torch.linspace(0.1, 10, 40, dtype=torch.float64)[:, None]
    a = recommend_normalization(q, d, n_bootstrap=0)
    b = recommend_normalization(d, q, n_bootstrap=0)
    assert a.delta == pytest.approx(-b.delta, abs=1e-9)
    assert a.delta != 0 and a.recommendation != b.recommendation


def test_input_validation():
    with pytest.raises(ValueError, match="pair matrices"):
        component_fim(torch.randn(3, 4), torch.randn(2, 4), 1, 0)
    with pytest.raises(ValueError, match="variant must be 'qnorm' or 'dnorm'"):
        pair_gradients(torch.randn(3, 4), torch.randn(3, 4), "cosine")
    with pytest.raises(ValueError, match="gamma_query must lie in"):
        component_fim(torch.randn(3, 4), torch.randn(3, 4), 2, 0)


@pytest.mark.slow
def test_kappa_rule_on_minilm_runs_undamped(minilm_dir, beir_dir):
    # all-MiniLM-L6-v2, 800 SciFact train pairs (≥ 2n = 768), 64 tokens: full-rank F, a finite interval
    from st_magnitude.diagnostics import run_kappa
    from st_magnitude.integrations.models import load_model

    torch.set_num_threads(2)
    model = load_model(str(minilm_dir), max_seq_length=64)
    res, seconds, source = run_kappa(model, [beir_dir / "scifact"], n_pairs=800, n_bootstrap=10)
    assert res.n_pairs == 800 and res.dim == 384 and res.damping == 0.0
    assert res.rank_qnorm > 700 and res.rank_dnorm > 700
    assert math.isfinite(res.delta) and res.ci_low <= res.ci_high
    assert "scifact/train" in source
