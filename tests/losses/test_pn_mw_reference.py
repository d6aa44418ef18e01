"""PartialNormInfoNCE and MW against brute-force Python loops, and paper 001's properties (Lemmas 1–2).

The losses are fed embeddings through ``compute_loss_from_embeddings`` with a "similarity" that returns a fixed
score matrix, so every test runs on exact, random scores.
"""

from __future__ import annotations

import math

import pytest
import torch
from conftest import build_tiny_st
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import Tensor

from st_magnitude.losses import MWLoss, PartialNormInfoNCELoss
from st_magnitude.losses.mw import mw_negatives, pairwise_softplus_sum
from st_magnitude.similarity import get_similarity

F64 = torch.float64


# ---------------------------------------------------------------------------------------------------------------
# brute-force references: plain Python over a score matrix S[B, B(1+H)] (positives on the diagonal)
# ---------------------------------------------------------------------------------------------------------------
def ref_infonce(S: list[list[float]], scale: float) -> float:
    total = 0.0
    for i, row in enumerate(S):
        z = sum(math.exp(scale * s) for s in row)
        total += -math.log(math.exp(scale * row[i]) / z)
    return total / len(S)


def ref_mw(S: list[list[float]], tau: float, reduction: str) -> float:
    B = len(S)
    negatives = [S[j][k] for j in range(B) for k in range(len(S[j])) if k != j]
    total = 0.0
    for i in range(B):
        for s_neg in negatives:
            z = (S[i][i] - s_neg) / tau
            total += -math.log(1.0 / (1.0 + math.exp(-z)))  # −log σ(z)
    return total / B if reduction == "paper" else total / (B * len(negatives))


def ref_aoc(S: list[list[float]]) -> float:
    B = len(S)
    negatives = [S[j][k] for j in range(B) for k in range(len(S[j])) if k != j]
    bad = sum(1.0 for i in range(B) for s in negatives if S[i][i] <= s)
    return bad / (B * len(negatives))


class MatrixSim(torch.nn.Module):
    """A 'similarity' that returns a fixed score matrix: rows index queries, columns documents (by position)."""

    def __init__(self, S: Tensor) -> None:
        super().__init__()
        self.S = S

    def forward(self, q: Tensor, d: Tensor) -> Tensor:
        rows = q[:, 0].long()
        cols = d[:, 0].long()
        return self.S[rows][:, cols] + 0.0 * (q.sum() + d.sum())

    def pairwise(self, q: Tensor, d: Tensor) -> Tensor:
        return self.S[q[:, 0].long(), d[:, 0].long()] + 0.0 * (q.sum() + d.sum())


@pytest.fixture(scope="module")
def raw_model(tiny_bert_dir):
    """One tiny plain model for the whole module: these tests only read it (scores come from MatrixSim)."""
    return build_tiny_st(tiny_bert_dir, normalize=False)


def _index_embeddings(B: int, H: int) -> list[Tensor]:
    """Column c of the batch holds document ids c*B .. c*B+B-1; queries hold row ids 0..B-1."""
    return [torch.arange(B, dtype=torch.float64).unsqueeze(1)] + [
        (torch.arange(B, dtype=torch.float64) + c * B).unsqueeze(1) for c in range(H + 1)
    ]


def _with_matrix(loss, S: Tensor):
    loss.similarity_fct = MatrixSim(S)
    return loss


def _infonce(model, S: Tensor, scale: float = 20.0) -> Tensor:
    B, M = S.shape
    loss = _with_matrix(PartialNormInfoNCELoss(model, "dot", scale=scale), S)
    return loss.compute_loss_from_embeddings(_index_embeddings(B, M // B - 1))


def _mw(model, S: Tensor, tau: float = 0.01, reduction: str = "paper", chunk_size: int = 2**20) -> Tensor:
    B, M = S.shape
    loss = _with_matrix(MWLoss(model, "dot", temperature=tau, reduction=reduction, chunk_size=chunk_size), S)
    return loss.compute_loss_from_embeddings(_index_embeddings(B, M // B - 1))


@pytest.mark.parametrize("B,H", [(2, 0), (5, 0), (4, 2), (1, 3)])
def test_infonce_matches_python_loop(raw_model, B, H):
    g = torch.Generator().manual_seed(B * 10 + H)
    S = torch.randn(B, B * (1 + H), generator=g, dtype=F64) * 0.3
    got = _infonce(raw_model, S, scale=20.0)
    assert got.item() == pytest.approx(ref_infonce(S.tolist(), 20.0), rel=1e-10, abs=1e-10)


@pytest.mark.parametrize("B,H", [(2, 0), (5, 0), (4, 2), (1, 3), (3, 5)])
@pytest.mark.parametrize("reduction", ["paper", "mean"])
def test_mw_matches_python_loop(raw_model, B, H, reduction):
    g = torch.Generator().manual_seed(B * 10 + H)
    S = torch.randn(B, B * (1 + H), generator=g, dtype=F64) * 0.05
    # a tiny chunk forces many chunks; the result must not depend on it
    for chunk in (1, 7, 2**20):
        got = _mw(raw_model, S, tau=0.01, reduction=reduction, chunk_size=chunk)
        assert got.item() == pytest.approx(ref_mw(S.tolist(), 0.01, reduction), rel=1e-5)


def test_mw_pair_count_and_value_at_zero(raw_model):
    """Digest 001 P5/P7: |S⁻| = B(HB + B − 1); all-equal scores give ℓ = log 2 per pair."""
    B, H = 8, 5
    S = torch.zeros(B, B * (1 + H), dtype=F64)
    n_neg = B * (H * B + B - 1)
    assert n_neg == 376
    assert _mw(raw_model, S, reduction="paper").item() == pytest.approx(n_neg * math.log(2), rel=1e-6)
    assert _mw(raw_model, S, reduction="mean").item() == pytest.approx(math.log(2), rel=1e-6)


def test_pairwise_softplus_sum_gradients_match_autograd():
    """The chunked custom-autograd pair sum equals the naive broadcast softplus, values and gradients."""
    g = torch.Generator().manual_seed(0)
    pos = (torch.randn(6, generator=g, dtype=F64) * 0.1).requires_grad_()
    neg = (torch.randn(23, generator=g, dtype=F64) * 0.1).requires_grad_()
    got = pairwise_softplus_sum(pos, neg, temperature=0.05, chunk_size=5)
    got.backward()
    pos2 = pos.detach().clone().requires_grad_()
    neg2 = neg.detach().clone().requires_grad_()
    ref = torch.nn.functional.softplus((neg2.unsqueeze(0) - pos2.unsqueeze(1)) / 0.05).sum()
    ref.backward()
    torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(pos.grad, pos2.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(neg.grad, neg2.grad, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------------------------------
# paper 001 properties
# ---------------------------------------------------------------------------------------------------------------
score_matrices = st.tuples(st.integers(2, 5), st.integers(0, 3), st.integers(0, 2**31 - 1))


@settings(max_examples=25, deadline=None)
@given(score_matrices, st.floats(-3.0, 3.0))
def test_per_query_shift_infonce_invariant_mw_not(raw_model, params, spread):
    """Lemma 1 / P1–P2: a per-query shift leaves InfoNCE unchanged and changes MW (generic shifts)."""
    B, H, seed = params
    g = torch.Generator().manual_seed(seed)
    S = torch.randn(B, B * (1 + H), generator=g, dtype=F64) * 0.1
    shift = torch.randn(B, 1, generator=g, dtype=F64) * 0.2 + spread * torch.arange(B).unsqueeze(1) * 0.1
    shifted = S + shift
    assert _infonce(raw_model, shifted).item() == pytest.approx(_infonce(raw_model, S).item(), abs=1e-9)
    if float(shift.max() - shift.min()) > 1e-3:
        assert abs(_mw(raw_model, shifted).item() - _mw(raw_model, S).item()) > 1e-6


@settings(max_examples=25, deadline=None)
@given(score_matrices, st.floats(-5.0, 5.0))
def test_global_shift_invariance(raw_model, params, c):
    """P3: adding one constant to every score changes neither loss."""
    B, H, seed = params
    S = torch.randn(B, B * (1 + H), generator=torch.Generator().manual_seed(seed), dtype=F64) * 0.1
    assert _infonce(raw_model, S + c).item() == pytest.approx(_infonce(raw_model, S).item(), abs=1e-8)
    assert _mw(raw_model, S + c).item() == pytest.approx(_mw(raw_model, S).item(), rel=1e-6)


@settings(max_examples=40, deadline=None)
@given(score_matrices, st.floats(1e-3, 10.0), st.floats(0.01, 3.0))
def test_lemma2_aoc_bound(raw_model, params, tau, spread):
    """Lemma 2 / P4: batch AoC ≤ L_MW(mean over pairs)/log 2, for every τ."""
    B, H, seed = params
    S = torch.randn(B, B * (1 + H), generator=torch.Generator().manual_seed(seed), dtype=F64) * spread
    aoc = ref_aoc(S.tolist())
    bound = _mw(raw_model, S, tau=tau, reduction="mean").item() / math.log(2)
    assert aoc <= bound + 1e-9


def test_mw_negatives_exclude_own_positive_only():
    sim = get_similarity("dot")
    q = torch.eye(3)
    d = torch.eye(3).repeat(2, 1)  # 6 docs
    neg = mw_negatives(sim, q, d, torch.arange(3))
    finite = neg[torch.isfinite(neg)]
    assert neg.numel() == 3 * 6 and finite.numel() == 3 * 6 - 3  # own positives are −∞: they add exactly 0
    assert finite.sum().item() == pytest.approx(3.0)  # each row keeps its hard-negative copy of its own positive
    pos = torch.tensor([0.3, 0.9])
    assert float(pairwise_softplus_sum(pos, neg, 0.1)) == pytest.approx(float(pairwise_softplus_sum(pos, finite, 0.1)))
