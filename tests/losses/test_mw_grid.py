"""MW's grid pair stage against the pairwise sum in float64: values and every gradient, on random, clustered, tied,
outlier-laden and separated scores, B = 2 … 512, H = 0 … 5, τ = 1e-3 … 1; its truncation bound; its window; the
losses that use it (plain, cached, learnable τ, every similarity) equal to the pairwise stage.

The goal: the loss within 1e-6 relative and every gradient within 1e-5 of its largest magnitude."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from st_magnitude import _cpu_shortcuts
from st_magnitude.losses import CachedMWLoss, MWLoss
from st_magnitude.losses import _mw_grid as grid
from st_magnitude.losses.mw import choose_pair_stage

LOSS_RTOL, GRAD_TOL = 1e-6, 1e-5


def reference(pos: torch.Tensor, block: torch.Tensor, own: torch.Tensor, inv_tau: float):
    """Every pair in float64 (broadcast softplus), the row's own positive left out; autograd gradients."""
    pos = pos.double().detach().requires_grad_()
    block = block.double().detach().requires_grad_()
    keep = torch.ones_like(block, dtype=torch.bool)
    keep[torch.arange(block.size(0)), own] = False
    z = (block[keep].unsqueeze(0) - pos.unsqueeze(1)) * inv_tau
    loss = torch.nn.functional.softplus(z).sum()
    loss.backward()
    return loss.detach(), pos.grad, block.grad


def fast(pos, block, own, inv_tau, dtype=torch.float64):
    pos = pos.to(dtype).detach().requires_grad_()
    block = block.to(dtype).detach().requires_grad_()
    loss = grid.grid_pair_sum(pos, block, own, inv_tau)
    loss.backward()
    return loss.detach(), pos.grad, block.grad


def assert_exact(got, want, loss_rtol=LOSS_RTOL, grad_tol=GRAD_TOL):
    (lg, pg, bg), (lw, pw, bw) = got, want
    # a loss among float64's subnormals (every pair beyond z ≈ −708) has no more digits than its spacing, 2^-1074
    # per pair summed: below that the relative goal is not representable
    subnormal = 4 * pg.numel() * bg.numel() * 2.0**-1074
    assert abs(float(lg) - float(lw)) <= loss_rtol * abs(float(lw)) + subnormal, (float(lg), float(lw))
    for g, w, name in ((pg, pw, "positives"), (bg, bw, "scores")):
        err = (g.double() - w).abs().max() / w.abs().max().clamp_min(1e-300)
        assert err <= grad_tol, f"{name}: {float(err):.2e}"


def scores(kind: str, B: int, H: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(positives, block B × B(1+H), own columns): the diagonal of the first B columns holds the positives."""
    g = torch.Generator().manual_seed(seed)
    M = B * (1 + H)
    if kind == "random":  # cosine of random embeddings
        q = torch.nn.functional.normalize(torch.randn(B, 16, generator=g, dtype=torch.float64), dim=1)
        d = torch.nn.functional.normalize(torch.randn(M, 16, generator=g, dtype=torch.float64), dim=1)
        d[:B] = torch.nn.functional.normalize(q + 0.7 * d[:B], dim=1)
        block = q @ d.T
    elif kind == "clustered":  # six tight topics
        centres = torch.randn(6, 16, generator=g, dtype=torch.float64)
        q = centres[torch.randint(0, 6, (B,), generator=g)] + 0.05 * torch.randn(
            B, 16, generator=g, dtype=torch.float64
        )
        d = centres[torch.randint(0, 6, (M,), generator=g)] + 0.05 * torch.randn(
            M, 16, generator=g, dtype=torch.float64
        )
        block = torch.nn.functional.normalize(q, dim=1) @ torch.nn.functional.normalize(d, dim=1).T
    elif kind == "tied":  # a 0.05 lattice: many identical scores
        block = (torch.randn(B, M, generator=g, dtype=torch.float64) * 4).round() * 0.05
    elif kind == "outliers":  # a few scores far from the bulk, one positive among them
        block = 0.2 * torch.randn(B, M, generator=g, dtype=torch.float64)
        block.view(-1)[torch.randint(0, B * M, (3,), generator=g)] = torch.tensor([40.0, -35.0, 12.0]).double()
        block[0, 0] = 25.0
    elif kind == "separated":  # every positive far above every negative: every pair in the exponential tail
        block = 0.1 * torch.rand(B, M, generator=g, dtype=torch.float64)
        block[torch.arange(B), torch.arange(B)] = 0.9 + 0.05 * torch.rand(B, generator=g, dtype=torch.float64)
    elif kind == "dot":  # unbounded scores, ±30
        block = 15 * torch.randn(B, M, generator=g, dtype=torch.float64)
    else:
        raise AssertionError(kind)
    own = torch.arange(B)
    return block[own, own].clone(), block, own


KINDS = ["random", "clustered", "tied", "outliers", "separated", "dot"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("B,H", [(2, 0), (7, 5), (64, 1)])
@pytest.mark.parametrize("tau", [1e-3, 0.01, 0.1, 1.0])
def test_grid_equals_every_pair(kind, B, H, tau):
    pos, block, own = scores(kind, B, H, seed=B + H)
    assert_exact(fast(pos, block, own, 1 / tau), reference(pos, block, own, 1 / tau))


@pytest.mark.parametrize(
    "kind,tau,B",
    [
        ("random", 0.01, 256),
        ("dot", 1.0, 256),
        *[
            pytest.param(k, t, 512, marks=pytest.mark.slow)
            for k, t in [("random", 0.01), ("dot", 1.0), ("clustered", 1e-3)]
        ],
    ],
)
def test_grid_equals_every_pair_at_large_batches(kind, tau, B):
    pos, block, own = scores(kind, B, 0, seed=3)
    assert_exact(fast(pos, block, own, 1 / tau), reference(pos, block, own, 1 / tau))


@settings(max_examples=40, deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    B=st.integers(2, 40),
    H=st.integers(0, 5),
    log_tau=st.floats(-3, 0),
    seed=st.integers(0, 2**16),
)
def test_grid_equals_every_pair_property(kind, B, H, log_tau, seed):
    pos, block, own = scores(kind, B, H, seed)
    inv_tau = 10.0**-log_tau
    assert_exact(fast(pos, block, own, inv_tau), reference(pos, block, own, inv_tau))


def test_separated_batch_keeps_relative_accuracy_in_the_tail():
    pos, block, own = scores("separated", 32, 1, seed=0)
    got, want = fast(pos, block, own, 100.0), reference(pos, block, own, 100.0)
    assert float(want[0]) < 1e-25  # every pair deep in the tail: an absolute error would not show
    assert_exact(got, want, loss_rtol=1e-9)


def test_a_loss_at_the_edge_of_float64_keeps_its_digits():
    """Every pair at z ≈ −700 … −712: σ(z) still a float64 (sigmoid alone would flush it to 0 past −709, and the
    Taylor terms with it); the loss, ≈ 1e-305, to 1e-6 relative."""
    g = torch.Generator().manual_seed(0)
    block = 0.188 + 0.012 * torch.rand(8, 16, generator=g, dtype=torch.float64)
    own = torch.arange(8)
    block[own, own] = 0.9
    pos = block[own, own].clone()
    got, want = fast(pos, block, own, 1e3), reference(pos, block, own, 1e3)
    assert 1e-310 < float(want[0]) < 1e-300
    assert_exact(got, want)


@pytest.mark.parametrize("dtype", [torch.float32])
def test_float32_scores_are_as_exact_as_the_reference_allows(dtype):
    pos, block, own = scores("random", 128, 1, seed=1)
    pos, block = pos.to(dtype), block.to(dtype)
    assert_exact(fast(pos, block, own, 100.0, dtype), reference(pos, block, own, 100.0))


def test_scores_beyond_the_grid_bound_are_paired_exactly_outside_a_window():
    pos, block, own = scores("random", 48, 1, seed=2)
    block[3, 7], block[5, 60], block[9, 9] = 1e4, -1e4, 3e3  # 1e6 τ apart: no level fits MAX_NODES
    pos[9] = 3e3
    lo, hi = grid.score_range(block)
    plan = grid.plan_for_range(pos, 100.0, lo, hi, block.numel(), block)
    assert plan.windowed and plan.nodes <= grid.MAX_NODES
    assert_exact(fast(pos, block, own, 100.0), reference(pos, block, own, 100.0))


def test_tiny_tau_on_unbounded_scores_stays_within_the_grid_bound():
    pos, block, own = scores("dot", 32, 1, seed=4)
    lo, hi = grid.score_range(block)
    plan = grid.plan_for_range(pos, 1e3, lo, hi, block.numel(), block)
    assert plan.nodes <= grid.MAX_NODES
    assert_exact(fast(pos, block, own, 1e3), reference(pos, block, own, 1e3))


@pytest.mark.parametrize("centre,spread,tau", [(1e5, 1.0, 1e-3), (1e4, 30.0, 1e-3)])
def test_float32_scores_far_from_zero_keep_their_nodes(centre, spread, tau):
    """Node numbers beyond float32's exact integers (score / spacing ≥ 2^22): located in float64, not rounded."""
    pos, block, own = scores("random", 40, 1, seed=6)
    pos, block = (centre + spread * pos).float(), (centre + spread * block).float()
    lo, hi = grid.score_range(block)
    assert grid.plan_for_range(pos, 1 / tau, lo, hi, block.numel(), block).wide
    assert_exact(fast(pos, block, own, 1 / tau, torch.float32), reference(pos, block, own, 1 / tau))


def test_non_finite_scores_are_refused_naming_them():
    pos, block, own = scores("random", 4, 0, seed=0)
    block[1, 2] = math.nan
    with pytest.raises(ValueError, match="MW scores must be finite"):
        fast(pos, block, own, 100.0)


def test_the_accelerators_deposit_gives_the_same_numbers(monkeypatch):
    """``index_add_`` (what a GPU deposits with) instead of the CPU's ``bincount``: the same loss and gradients."""
    pos, block, own = scores("clustered", 64, 2, seed=7)
    want = reference(pos, block, own, 100.0)
    monkeypatch.setattr(_cpu_shortcuts, "ENABLED", False)
    assert_exact(fast(pos, block, own, 100.0), want)


def test_repeated_calls_are_bitwise_identical():
    pos, block, own = scores("clustered", 96, 1, seed=5)
    a, b = fast(pos, block, own, 100.0, torch.float32), fast(pos, block, own, 100.0, torch.float32)
    for x, y in zip(a, b):
        assert torch.equal(x, y)


@pytest.mark.parametrize("level", range(len(grid.LEVELS)))
def test_each_level_truncates_below_its_bound(level):
    """softplus(z + δ) and softplus'(z + δ) against their degree-D Taylor polynomials from z, |δ| ≤ α/2, with
    the derivatives the tables use (P_q(σ)): ≤ 1e-9 relative (loss) and absolute (gradient), z ∈ [−60, 60]."""
    alpha, degree = grid.LEVELS[level]
    z = torch.linspace(-60, 60, 6001, dtype=torch.float64)
    s = torch.sigmoid(z)
    polys = torch.as_tensor(grid._POLYS, dtype=torch.float64)
    derivs = [torch.nn.functional.softplus(z)] + [
        sum(polys[q, k] * s**k for k in range(1, q + 1)) for q in range(1, degree + 2)
    ]
    for frac in np.linspace(-0.5, 0.5, 7):
        delta = alpha * float(frac)
        value = sum(derivs[m] * delta**m / math.factorial(m) for m in range(degree + 1))
        slope = sum(derivs[m + 1] * delta**m / math.factorial(m) for m in range(degree + 1))
        exact = torch.nn.functional.softplus(z + delta)
        assert ((value - exact).abs() / exact).max() <= 1e-9
        assert (slope - torch.sigmoid(z + delta)).abs().max() <= 1e-9


def test_auto_picks_the_pairwise_sum_for_small_batches_and_the_grid_above():
    cpu = torch.device("cpu")
    assert choose_pair_stage("auto", 32, 32 * 64, cpu) == "pairwise"
    assert choose_pair_stage("auto", 256, 256 * 512, cpu) == "grid"
    assert choose_pair_stage("pairwise", 4096, 4096**2, cpu) == "pairwise"
    assert choose_pair_stage("grid", 2, 4, cpu) == "grid"


def test_a_bad_pair_stage_names_the_allowed_ones(tiny_model_raw):
    with pytest.raises(ValueError, match=r"pair_stage must be one of \['auto', 'grid', 'pairwise'\], got 'fast'"):
        MWLoss(tiny_model_raw, pair_stage="fast")


# ---------------------------------------------------------------------------------------------------------------
# the losses on a tiny model: the grid stage gives the pairwise stage's loss and gradients
# ---------------------------------------------------------------------------------------------------------------
def _columns(model, n_cols: int, size: int = 6):
    from conftest import TRAIN_SENTENCES

    return [
        model.preprocess([TRAIN_SENTENCES[(i + c) % len(TRAIN_SENTENCES)] + " x" * c for i in range(size)])
        for c in range(n_cols)
    ]


def _loss_and_grads(loss, model, features):
    model.zero_grad()
    for p in loss.parameters():
        p.grad = None
    value = loss(features, None)
    value.backward()
    grads = {n.removeprefix("loss."): p.grad.clone() for n, p in loss.named_parameters() if p.grad is not None}
    return float(value.detach()), grads


def _assert_same(a, b):
    (va, ga), (vb, gb) = a, b
    assert va == pytest.approx(vb, rel=1e-6)
    assert set(ga) == set(gb) and ga
    scale = max(float(g.abs().max()) for g in gb.values())  # 1e-5 of the largest gradient of the model
    for name in ga:
        assert (ga[name] - gb[name]).abs().max() <= 1e-5 * scale, name


@pytest.mark.parametrize(
    "similarity,temperature,reduction,n_cols",
    [
        ("cosine", 0.01, "paper", 2),
        ("dot", 1.0, "mean", 3),
        ("qnorm", 0.05, "paper", 4),
        ("cosine", "learnable", "mean", 3),
    ],
)
def test_mw_loss_on_the_grid_equals_the_pairwise_loss(tiny_model_raw, similarity, temperature, reduction, n_cols):
    model = tiny_model_raw.double().eval()
    kw = {"temperature": temperature, "reduction": reduction}
    features = _columns(model, n_cols)
    pairwise = _loss_and_grads(MWLoss(model, similarity, pair_stage="pairwise", **kw), model, features)
    on_grid = _loss_and_grads(MWLoss(model, similarity, pair_stage="grid", **kw), model, features)
    _assert_same(on_grid, pairwise)


@pytest.mark.parametrize("temperature", [0.01, "learnable"])
@pytest.mark.parametrize("similarity", ["cosine", "dnorm"])
def test_cached_mw_on_the_grid_equals_the_plain_pairwise_loss(tiny_model_raw, similarity, temperature):
    model = tiny_model_raw.double().eval()
    kw = {"temperature": temperature}
    features = _columns(model, 3)
    pairwise = _loss_and_grads(MWLoss(model, similarity, pair_stage="pairwise", **kw), model, features)
    cached = _loss_and_grads(
        CachedMWLoss(model, similarity, mini_batch_size=4, pair_stage="grid", **kw), model, features
    )
    _assert_same(cached, pairwise)


def test_a_shared_plan_without_deferral_back_propagates_every_block_itself():
    """Blocks sharing one grid (a cached step's, outside its chunked backward) still give each block's positives
    their gradient: the sum over blocks equals the whole block's."""
    pos, block, own = scores("random", 24, 1, seed=8)
    want = reference(pos, block, own, 100.0)
    lo, hi = grid.score_range(block)
    plan = grid.plan_for_range(pos, 100.0, lo, hi, block.numel(), block)
    p, b = pos.clone().requires_grad_(), block.clone().requires_grad_()
    total = sum(grid.grid_pair_sum(p, b[s : s + 5], own[s : s + 5], 100.0, plan) for s in range(0, 24, 5))
    total.backward()
    assert_exact((total.detach(), p.grad, b.grad), want)
    with pytest.raises(ValueError, match="defer_positive_grad needs a plan"):
        grid.grid_pair_sum(p, b, own, 100.0, None, defer_positive_grad=True)


def test_config_names_the_pair_stage(tiny_model_raw):
    assert MWLoss(tiny_model_raw, pair_stage="grid").get_config_dict()["pair_stage"] == "grid"
    assert CachedMWLoss(tiny_model_raw).pair_stage == "auto"
