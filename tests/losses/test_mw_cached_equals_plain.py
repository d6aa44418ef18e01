"""CachedMWLoss gives MWLoss's loss and gradients for every chunking of a step, on both pair stages.

A cached step runs the plain loss's code chunk by chunk and defers the positives' gradient to the end of the step;
a step that fits one mini-batch (``mini_batch_size`` ≥ the batch, an epoch's smaller last batch) must do the same as
one of several chunks. Both are checked against an independent float64 reference: every (positive, negative) pair
summed by autograd from the score matrix, with the similarity and temperature the loss holds. The GradCache step
(2) is run directly on the embeddings (``calculate_loss(..., with_backward=True)``, what ST's mixin calls between
embedding and back-propagating into the model), so every similarity, size and chunking is cheap to draw.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn.functional import softplus

from st_magnitude.losses import CachedMWLoss, MWLoss
from st_magnitude.losses._temperature import LearnableScale

SIMILARITIES = ("cosine", "dot", "qnorm", "dnorm", "learnable")
STAGES = ("grid", "pairwise")
DIM = 8


def _losses(model, similarity, temperature, stage, mini_batch_size):
    kw = {"temperature": temperature, "reduction": "paper"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # learnable γ̂ held by the loss, magnitude on a plain model: on purpose
        torch.manual_seed(3)  # the same γ̂ for both
        plain = MWLoss(model, similarity, pair_stage=stage, **kw).double()
        torch.manual_seed(3)
        cached = CachedMWLoss(model, similarity, pair_stage=stage, mini_batch_size=mini_batch_size, **kw).double()
    return plain, cached


def _own_params(loss):
    named = loss.named_parameters()
    return {n.removeprefix("loss."): p for n, p in named if not n.startswith(("model.", "loss.model."))}


def _columns(batch, hard, seed, spread):
    g = torch.Generator().manual_seed(seed)
    cols = []
    for _ in range(2 + hard):
        x = torch.randn(batch, DIM, generator=g, dtype=torch.float64)
        cols.append(x * torch.exp(spread * torch.randn(batch, 1, generator=g, dtype=torch.float64)))
    return cols


def reference(loss, cols):
    """Every pair in float64, by autograd: ``(1/B) Σ_i Σ_{k ∈ S⁻} softplus((s_k⁻ − s_i⁺)/τ)``."""
    q, docs = cols[0], torch.cat(cols[1:])
    scores = loss.similarity_fct(q, docs).double()
    if isinstance(loss.temperature, LearnableScale):
        scores = scores * loss.temperature().double()
    else:
        scores = scores / loss.temperature
    b = q.size(0)
    pos = scores[torch.arange(b), torch.arange(b)]
    mask = torch.ones_like(scores, dtype=torch.bool)
    mask[torch.arange(b), torch.arange(b)] = False
    neg = scores[mask]
    return softplus(neg.unsqueeze(0) - pos.unsqueeze(1)).sum() / b


def _run(loss, cols, cached):
    leaves = [c.clone().requires_grad_() for c in cols]
    for p in loss.parameters():
        p.grad = None
    if cached:
        value = loss.calculate_loss([[x] for x in leaves], with_backward=True)
    else:
        value = loss.compute_loss_from_embeddings(leaves)
        value.backward()
    grads = {f"col{i}": x.grad.clone() for i, x in enumerate(leaves)}
    grads.update({n: p.grad.clone() for n, p in _own_params(loss).items() if p.grad is not None})
    return float(value.detach()), grads


def _reference_run(loss, cols):
    leaves = [c.clone().requires_grad_() for c in cols]
    for p in loss.parameters():
        p.grad = None
    value = reference(loss, leaves)
    value.backward()
    grads = {f"col{i}": x.grad.clone() for i, x in enumerate(leaves)}
    grads.update({n: p.grad.clone() for n, p in _own_params(loss).items() if p.grad is not None})
    return float(value.detach()), grads


def assert_same(got, want, what):
    (v, g), (rv, rg) = got, want
    assert v == pytest.approx(rv, rel=1e-6), what
    assert set(g) == set(rg), what
    largest = max(float(t.abs().max()) for t in rg.values())
    for name in rg:
        err = float((g[name] - rg[name]).abs().max())
        assert err <= 1e-5 * largest, f"{what}: {name} off by {err:.3g} (largest gradient {largest:.3g})"


def check_case(model, similarity, temperature, stage, batch, last, hard, mini_batch_size, seed, spread):
    plain, cached = _losses(model, similarity, temperature, stage, mini_batch_size)
    for size in (batch, last):  # a full batch, then an epoch's last, smaller one through the same losses
        cols = _columns(size, hard, seed + size, spread)
        want = _reference_run(plain, cols)
        what = f"{similarity} τ={temperature} {stage} B={size} H={hard} mini_batch_size={mini_batch_size}"
        assert_same(_run(plain, cols, cached=False), want, "plain " + what)
        assert_same(_run(cached, cols, cached=True), want, "cached " + what)


@st.composite
def cases(draw, max_batch):
    hard = draw(st.integers(0, 3))
    batch = draw(st.integers(2 if hard == 0 else 1, max_batch))
    last = draw(st.integers(2 if hard == 0 else 1, batch))
    return {
        "similarity": draw(st.sampled_from(SIMILARITIES)),
        "temperature": draw(st.sampled_from([0.01, 0.1, 1.0, "learnable"])),
        "stage": draw(st.sampled_from(STAGES)),
        "batch": batch,
        "last": last,
        "hard": hard,
        "mini_batch_size": draw(st.integers(1, 2 * batch)),
        "seed": draw(st.integers(0, 2**16)),
        "spread": draw(st.sampled_from([0.0, 0.5])),  # norms spread over e^±1 (dot, qnorm, dnorm see them)
    }


@pytest.fixture(scope="module")
def model(tiny_bert_dir):
    from conftest import build_tiny_st

    return build_tiny_st(tiny_bert_dir, normalize=False).double()


@settings(max_examples=30, deadline=None)
@given(case=cases(max_batch=9))
def test_cached_equals_plain_equals_every_pair(model, case):
    check_case(model, **case)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(case=cases(max_batch=40))
def test_cached_equals_plain_equals_every_pair_sweep(model, case):
    check_case(model, **case)


@pytest.mark.parametrize(
    "batch,mini_batch_size,stage",
    [(128, 128, "auto"), (96, 128, "auto"), (64, 64, "grid"), (64, 64, "pairwise"), (64, 1000, "grid")],
)
def test_a_step_that_fits_one_mini_batch(model, batch, mini_batch_size, stage):
    """The step sizes users hit: the whole step in one mini-batch, and an epoch's last batch smaller than it."""
    check_case(model, "cosine", 0.01, stage, batch, batch, 0, mini_batch_size, seed=batch, spread=0.0)
