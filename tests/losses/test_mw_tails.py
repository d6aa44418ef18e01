"""MW's scores far from the grid: the tails (sorted positives, linear and exponential series, near runs pair by pair)
and the paged grid, against the float64 sum over every pair; scores of any finite magnitude; and the bound on the
pairs evaluated one by one (no input falls back to every pair).

The goal: the loss within 1e-6 relative and every gradient within 1e-5 of its largest magnitude."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_mw_grid import assert_exact, fast, reference, scores

from st_magnitude.losses import _mw_grid as grid
from st_magnitude.losses import _mw_tails as tails_module
from st_magnitude.losses._mw_tails import Tails


def every_pair(pos: torch.Tensor, x: torch.Tensor, inv_tau: float):
    """Σ softplus((x − p)·inv_tau) over every pair in float64, with autograd gradients."""
    pos = pos.double().detach().requires_grad_()
    x = x.double().detach().requires_grad_()
    loss = torch.nn.functional.softplus((x.unsqueeze(1) - pos.unsqueeze(0)) * inv_tau).sum()
    loss.backward()
    return loss.detach(), pos.grad, x.grad


def on_tails(pos: torch.Tensor, x: torch.Tensor, inv_tau: float):
    lo = min(float(pos.min()), float(x.min()))
    hi = max(float(pos.max()), float(x.max()))
    loss, grad_x, grad_pos = Tails(pos, inv_tau, lo, hi).pair_sums(x.double(), True)
    return loss, grad_pos, grad_x


def layout(kind: str, n_pos: int, n_x: int, scale: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    pos = torch.randn(n_pos, generator=g, dtype=torch.float64)
    x = torch.randn(n_x, generator=g, dtype=torch.float64)
    if kind == "ties":  # a coarse lattice: many equal scores, positives among them
        pos, x = (pos * 3).round() / 3, (x * 3).round() / 3
    elif kind == "one_side":  # every score below every positive (all pairs on the exponential side) ...
        pos, x = pos.abs() + 2, -x.abs() - 2
    elif kind == "other_side":  # ... and above (all on the linear side)
        pos, x = -pos.abs() - 2, x.abs() + 2
    elif kind == "wide":  # positives spread over many decades, scores among them
        pos = torch.sign(pos) * 10.0 ** (6 * torch.rand(n_pos, generator=g, dtype=torch.float64) - 3)
        x = torch.sign(x) * 10.0 ** (6 * torch.rand(n_x, generator=g, dtype=torch.float64) - 3)
    elif kind == "far":  # a bulk at 1e5 and a cluster of scores at the positives' scale
        x[: n_x // 2] += 1e5
    return pos * scale, x * scale


KINDS = ["normal", "ties", "one_side", "other_side", "wide", "far"]


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    n_pos=st.integers(1, 120),
    n_x=st.integers(1, 400),
    log_scale=st.floats(-3, 17),
    log_tau=st.floats(-6, 2),
    seed=st.integers(0, 2**16),
)
def test_tails_equal_every_pair(kind, n_pos, n_x, log_scale, log_tau, seed):
    """Scores from 1e-3 to 1e17 (centre and spread scaled together), τ from 1e-6 to 100, ties, every pair on one
    side, positives spread over decades: the tails give the float64 sum over every pair."""
    pos, x = layout(kind, n_pos, n_x, 10.0**log_scale, seed)
    inv_tau = 10.0**-log_tau
    assert_exact(on_tails(pos, x, inv_tau), every_pair(pos, x, inv_tau))


@pytest.mark.parametrize("centre", [1e3, 1e9, 1e17, 1e30])
def test_tails_keep_their_digits_far_from_zero(centre):
    """Scores around a huge centre with differences of a few τ: every pair's z comes from local differences, never
    from centre/τ (which would carry errors of centre·1e-16/τ)."""
    g = torch.Generator().manual_seed(1)
    tau = centre * 2.0**-40  # differences are exact multiples of the spacing at the centre
    pos = centre + tau * torch.randint(-40, 40, (50,), generator=g).double()
    x = centre + tau * torch.randint(-60, 60, (300,), generator=g).double()
    assert_exact(on_tails(pos, x, 1 / tau), every_pair(pos, x, 1 / tau))


def test_a_separated_batch_keeps_relative_accuracy_on_the_tails():
    """Every pair 30–80 τ apart on the exponential side (loss ≈ 1e-15): relative, not absolute, accuracy."""
    g = torch.Generator().manual_seed(2)
    pos = 1.0 + 0.5 * torch.rand(64, generator=g, dtype=torch.float64)
    x = 0.2 * torch.rand(500, generator=g, dtype=torch.float64)
    got, want = on_tails(pos, x, 60.0), every_pair(pos, x, 60.0)
    assert float(want[0]) < 1e-10
    assert_exact(got, want, loss_rtol=1e-9)


# ---------------------------------------------------------------------------------------------------------------
# the grid stage with pages and tails: forced on small batches, where the every-pair reference fits
# ---------------------------------------------------------------------------------------------------------------
def force_pages(mp: pytest.MonkeyPatch) -> None:
    """No whole-range grid fits (8 nodes): every range is paged, at a small page, so the tails and the pages run at
    B ≤ 256."""
    mp.setattr(grid, "PAGES_FROM", 0.0)
    mp.setattr(grid, "PAGE_NODES", 16)
    mp.setattr(grid, "MAX_NODES", 8)


@pytest.fixture
def forced_pages(monkeypatch):
    force_pages(monkeypatch)


@pytest.mark.parametrize("kind", ["random", "clustered", "tied", "outliers", "separated", "dot"])
@pytest.mark.parametrize("tau", [1e-6, 1e-3, 0.01, 1.0])
def test_the_paged_grid_equals_every_pair(forced_pages, kind, tau):
    pos, block, own = scores(kind, 48, 1, seed=11)
    plan = grid.plan_for_range(pos, 1 / tau, *grid.score_range(block, pos), block.numel(), block)
    assert plan.windowed and plan.tails is not None
    assert_exact(fast(pos, block, own, 1 / tau), reference(pos, block, own, 1 / tau))


@settings(max_examples=25, deadline=None)
@given(
    kind=st.sampled_from(["random", "clustered", "tied", "outliers", "separated", "dot"]),
    B=st.integers(2, 40),
    H=st.integers(0, 3),
    log_tau=st.floats(-6, 0),
    norms=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_the_paged_grid_equals_every_pair_property(kind, B, H, log_tau, norms, seed):
    pos, block, own = scores(kind, B, H, seed)
    if norms:  # magnitude-carrying scores: each row and column scaled by a norm from 1e-2 to 1e2
        g = torch.Generator().manual_seed(seed)
        rows = 10.0 ** (4 * torch.rand(B, 1, generator=g, dtype=torch.float64) - 2)
        cols = 10.0 ** (4 * torch.rand(1, block.size(1), generator=g, dtype=torch.float64) - 2)
        block = block * rows * cols
        pos = block[own, own].clone()
    inv_tau = 10.0**-log_tau
    with pytest.MonkeyPatch.context() as mp:
        force_pages(mp)
        assert_exact(fast(pos, block, own, inv_tau), reference(pos, block, own, inv_tau))


def test_a_large_batch_on_pages_and_tails_equals_every_pair(monkeypatch):
    """B = 256, dot scores with norms over logspace(-2, 2) at τ = 0.01, the grid bounded to 1,024 nodes so pages
    and tails carry most pairs."""
    monkeypatch.setattr(grid, "MAX_NODES", 1024)
    monkeypatch.setattr(grid, "PAGES_FROM", 64.0)
    monkeypatch.setattr(grid, "PAGE_NODES", 64)
    g = torch.Generator().manual_seed(3)
    q = torch.nn.functional.normalize(torch.randn(256, 32, generator=g, dtype=torch.float64), dim=1)
    d = torch.nn.functional.normalize(q + 0.8 * torch.randn(256, 32, generator=g, dtype=torch.float64), dim=1)
    norms = torch.logspace(-2, 2, 256, dtype=torch.float64)
    q, d = q * norms[torch.randperm(256, generator=g)][:, None], d * norms[torch.randperm(256, generator=g)][:, None]
    block, own = q @ d.T, torch.arange(256)
    pos = block[own, own].clone()
    plan = grid.plan_for_range(pos, 100.0, *grid.score_range(block, pos), block.numel(), block)
    assert plan.windowed
    assert_exact(fast(pos, block, own, 100.0), reference(pos, block, own, 100.0))


@pytest.mark.parametrize("magnitude", [1e17, 1e20, 1e30, 3e38])
def test_finite_scores_of_any_magnitude_give_the_exact_loss(magnitude):
    """Float32 embeddings of norm 1e9 and beyond give scores past 1e17, whose node numbers exceed int64 (an
    OverflowError when the tables' nodes were made from a Python int): the loss and gradients are exact."""
    g = torch.Generator().manual_seed(4)
    block = magnitude * torch.randn(24, 48, generator=g, dtype=torch.float64)
    own = torch.arange(24)
    pos = block[own, own].clone()
    assert_exact(fast(pos, block, own, 100.0), reference(pos, block, own, 100.0))


def test_float32_scores_past_1e17_give_the_exact_loss():
    g = torch.Generator().manual_seed(5)
    block = (1e18 * torch.randn(16, 32, generator=g)).float()
    block[:, :8] = block[:, :8] * 1e-15  # a bulk near 1e3 too
    own = torch.arange(16)
    pos = block[own, own].clone()
    assert_exact(fast(pos, block, own, 100.0, torch.float32), reference(pos, block, own, 100.0))


# ---------------------------------------------------------------------------------------------------------------
# the cost bound: the pairs evaluated one by one stay a small multiple of the scores
# ---------------------------------------------------------------------------------------------------------------
def _count_near_pairs(monkeypatch) -> list[int]:
    counted = [0]
    original = Tails._near

    def counting(self, x, rows, start, lengths, grad_x, n_pairs):
        counted[0] += int(lengths.sum())
        return original(self, x, rows, start, lengths, grad_x, n_pairs)

    monkeypatch.setattr(Tails, "_near", counting)
    return counted


@pytest.mark.parametrize("case", ["cosine_tiny_tau", "far_cluster"])
def test_no_input_falls_back_to_every_pair(monkeypatch, case):
    """Cosine scores at τ = 1e-6 (a range of 10⁶ τ: nearly every score off the grid), and a tight cluster of
    positives far from the bulk with many scores among them (where a window on the bulk left every one of them to
    be paired with every positive): the pairs evaluated one by one stay below a few per score."""
    counted = _count_near_pairs(monkeypatch)
    g = torch.Generator().manual_seed(6)
    B = 256
    if case == "cosine_tiny_tau":
        pos, block, own = scores("random", B, 1, seed=6)
        inv_tau = 1e6
    else:
        block = 0.1 * torch.randn(B, 2 * B, generator=g, dtype=torch.float64)
        block[:, : B // 2] = 50.0 + 1e-4 * torch.randn(B, B // 2, generator=g, dtype=torch.float64)
        own = torch.arange(B) % (B // 2)
        pos = block[torch.arange(B), own].clone()
        inv_tau = 100.0
    want = reference(pos, block, own, inv_tau)
    got = fast(pos, block, own, inv_tau)
    assert_exact(got, want)
    assert counted[0] <= 4 * block.numel(), (counted[0], block.numel())


def test_the_series_truncation_is_below_its_bound():
    """softplus and σ against the tails' series from |z| = T on: relative to the pair's value the first neglected
    term is e^{−KT}/(K+1) < 1e-9 on the exponential side (the grid's own bound), far less on the linear side, and
    e^{−(K+1)T} < 1e-13 absolute for σ."""
    K, T = tails_module.SERIES_TERMS, tails_module.TAIL_Z
    z = torch.linspace(T, T + 40, 401, dtype=torch.float64)
    exp_side = sum((-1.0) ** (k + 1) * torch.exp(-k * z) / k for k in range(1, K + 1))
    exact = torch.log1p(torch.exp(-z))  # softplus(−z); softplus(z) = z + this (torch's softplus is z past z = 20)
    assert ((exp_side - exact) / exact).abs().max() < 1e-9
    assert ((z + exp_side - (z + exact)) / (z + exact)).abs().max() < 1e-13
    sig = 1 - sum((-1.0) ** (k + 1) * torch.exp(-k * z) for k in range(1, K + 1))
    assert (sig - torch.sigmoid(z)).abs().max() < 1e-13
    assert math.exp(-K * T) / (K + 1) < 1e-9 and math.exp(-(K + 1) * T) < 1e-13


@pytest.mark.parametrize("similarity,temperature", [("cosine", 1e-6), ("dot", 0.01), ("qnorm", "learnable")])
def test_plain_and_cached_losses_on_pages_equal_pairwise(forced_pages, tiny_model_raw, similarity, temperature):
    """The losses on a tiny model with every range paged: the plain loss and the cached one (chunks sharing one
    paged plan, the positives' gradient deferred to the end) give the pairwise stage's loss and gradients."""
    from test_mw_grid import _assert_same, _columns, _loss_and_grads

    from st_magnitude.losses import CachedMWLoss, MWLoss

    model = tiny_model_raw.double().eval()
    features = _columns(model, 3)
    kw = {"temperature": temperature}
    pairwise = _loss_and_grads(MWLoss(model, similarity, pair_stage="pairwise", **kw), model, features)
    plain = _loss_and_grads(MWLoss(model, similarity, pair_stage="grid", **kw), model, features)
    cached = _loss_and_grads(
        CachedMWLoss(model, similarity, mini_batch_size=4, pair_stage="grid", **kw), model, features
    )
    _assert_same(plain, pairwise)
    _assert_same(cached, pairwise)
