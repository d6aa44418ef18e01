"""RevelaLoss's per-step checks without a host read per step: one group per batch, an LM token in every chunk,
the one-hot Sim warning (counted on the device, read on the first calls and every interval), and the in-batch
term's pairs (listed from the shape alone when Sim cannot hold a zero)."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from test_revela_loss import TEXTS, build_tiny_llama, features_for, lm_batch

from st_magnitude import _cpu_shortcuts
from st_magnitude._warnings import ZeroRetrieverGradientWarning
from st_magnitude.losses import _batch
from st_magnitude.losses.revela import DECLARED_GROUP_LIMIT, ZERO_FREE_EXPONENT, RevelaLoss
from st_magnitude.modules import revela_attention


@pytest.fixture
def every_second_call(monkeypatch):
    """The CPU checked as an accelerator is, with no first calls and a flag read every second call."""
    monkeypatch.setattr(_cpu_shortcuts, "ENABLED", False)
    monkeypatch.setattr(_batch, "DUPLICATE_CHECK_FIRST", 0)
    monkeypatch.setattr(_batch, "FINITE_CHECK_INTERVAL", 2)


def test_a_mixed_batch_is_reported_at_the_next_read(tiny_model, every_second_call):
    loss = RevelaLoss(tiny_model, build_tiny_llama(), temperature=0.05)
    ids, mask = lm_batch(bsz=3)
    feats = features_for(tiny_model, TEXTS[:3], ids, mask)
    loss(feats, torch.tensor([0, 0, 1]))  # counted on the device, not read yet
    with pytest.raises(ValueError, match=r"mixes chunks of different groups \(found in 1 of the last 2 batches"):
        loss(feats, torch.tensor([0, 0, 0]))
    loss(feats, torch.tensor([0, 0, 0]))
    loss(feats, torch.tensor([0, 0, 0]))  # read again: nothing found


def test_a_chunk_without_lm_tokens_is_reported_at_the_next_read(tiny_model, every_second_call):
    loss = RevelaLoss(tiny_model, build_tiny_llama(), temperature=0.05)
    ids, mask = lm_batch(bsz=3)
    empty = mask.clone()
    empty[1] = 0
    q, p = torch.randn(3, 8), torch.randn(3, 8)
    loss.compute_loss_from_embeddings(q, p, ids, empty)
    with pytest.raises(ValueError, match=r"non-padding LM token \(found in 1 of the last 2 batches"):
        loss.compute_loss_from_embeddings(q, p, ids, mask)


def test_one_hot_batches_are_warned_at_the_next_read_and_counted(tiny_model, every_second_call):
    ids, mask = lm_batch()
    g = torch.Generator().manual_seed(0)
    q = torch.nn.functional.normalize(torch.randn(4, 8, generator=g), dim=-1).requires_grad_()
    p = torch.nn.functional.normalize(torch.randn(4, 8, generator=g), dim=-1)
    loss = RevelaLoss(tiny_model, build_tiny_llama(), temperature=1e-4)
    loss.compute_loss_from_embeddings(q, p, ids, mask)
    assert loss.one_hot_steps == 1  # read on request, still pending for the warning
    with pytest.warns(ZeroRetrieverGradientWarning, match="one-hot \\(row maximum 1.0 in fp32\\) in 2 of the last 2"):
        loss.compute_loss_from_embeddings(q, p, ids, mask)
    assert loss.one_hot_steps == 2


def test_sim_holds_no_zero_above_the_declared_temperature_and_does_below(tiny_model):
    """The rule behind skipping: Sim[i, j] ≥ exp(−2/τ)/(B − 1), so at 2/τ + ln(B − 1) = ZERO_FREE_EXPONENT the
    worst row (one cosine 1, the rest −1) keeps every weight; far below that temperature fp32 rounds them to 0."""
    bsz = 16
    cos = torch.full((bsz, bsz), -1.0)
    cos[:, 0], cos[0, 1] = 1.0, 1.0
    eye = torch.eye(bsz, dtype=torch.bool)

    def sim(tau: float) -> torch.Tensor:
        return torch.softmax((cos / tau).masked_fill(eye, float("-inf")), dim=-1)[~eye]

    tau = 2.0 / (ZERO_FREE_EXPONENT - math.log(bsz - 1))
    assert bool((sim(tau) >= torch.finfo(torch.float32).tiny).all())  # a normal number: no flush to zero either
    assert bool((sim(2.0 / 110) == 0).any())
    declared = 2.0 / (ZERO_FREE_EXPONENT - math.log(DECLARED_GROUP_LIMIT - 1))
    lm = build_tiny_llama()
    assert RevelaLoss(tiny_model, lm, temperature=declared * 1.001).host_reads_per_step == 0
    assert RevelaLoss(tiny_model, lm, temperature=declared * 0.999).host_reads_per_step == 1


@pytest.mark.parametrize(("temperature", "skips"), [(0.05, False), (1e-4, True)])
def test_the_in_batch_term_looks_for_zero_weights_only_when_sim_can_hold_them(
    tiny_model, monkeypatch, temperature, skips
):
    seen = []
    original = revela_attention.active_pairs

    def spy(sim, skip_zero_pairs=True, device=None):
        seen.append(skip_zero_pairs)
        return original(sim, skip_zero_pairs, device=device)

    monkeypatch.setattr(revela_attention, "active_pairs", spy)
    loss = RevelaLoss(tiny_model, build_tiny_llama(), temperature=temperature)
    ids, mask = lm_batch()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ZeroRetrieverGradientWarning)
        loss.compute_loss_from_embeddings(torch.randn(4, 8), torch.randn(4, 8), ids, mask)
    assert seen == [skips] and loss.host_reads_per_step == int(skips)
