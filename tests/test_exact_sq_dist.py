"""Every pair's squared distance from its own difference, in row chunks, against the float64 broadcast reference."""

from __future__ import annotations

import pytest
import torch

from st_magnitude import _exact_sq_dist
from st_magnitude._exact_sq_dist import exact_sq_dist


def _reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    diff = a.double()[:, None, :] - b.double()[None]
    return (diff * diff).sum(-1)


@pytest.mark.parametrize("chunk", [1, 7, 1 << 22])  # one difference at a time, a ragged last chunk, one chunk
def test_values_and_gradients_equal_the_broadcast_difference_in_any_chunking(monkeypatch, chunk):
    monkeypatch.setattr(_exact_sq_dist, "CHUNK_ELEMENTS", chunk)
    g = torch.Generator().manual_seed(0)
    a = torch.randn(5, 3, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, 3, generator=g, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(5, 4, generator=g, dtype=torch.float64)
    got = exact_sq_dist(a, b)
    torch.testing.assert_close(got, _reference(a, b), rtol=1e-12, atol=1e-12)
    grads = torch.autograd.grad((got * weights).sum(), (a, b))
    ref_grads = torch.autograd.grad((_reference(a, b) * weights).sum(), (a, b))
    for mine, ref in zip(grads, ref_grads):
        torch.testing.assert_close(mine, ref, rtol=1e-12, atol=1e-12)


def test_only_the_inputs_that_need_a_gradient_get_one():
    a = torch.randn(3, 2, requires_grad=True)
    b = torch.randn(2, 2)
    exact_sq_dist(a, b).sum().backward()
    assert a.grad is not None and b.grad is None
    torch.testing.assert_close(a.grad, 2 * (2 * a.detach() - b.sum(0)))  # Σ_j 2(a_i − b_j)


def test_near_aligned_pairs_keep_their_digits_in_float32():
    g = torch.Generator().manual_seed(1)
    a = torch.nn.functional.normalize(torch.randn(6, 64, generator=g, dtype=torch.float64), dim=-1) * 10
    b = a + 1e-3 * torch.randn(6, 64, generator=g, dtype=torch.float64)
    got = exact_sq_dist(a.float(), b.float()).double()
    ref = _reference(a.float(), b.float())  # the float32 inputs, differenced exactly
    torch.testing.assert_close(got.diagonal(), ref.diagonal(), rtol=1e-5, atol=0)


def test_rejects_anything_but_two_matrices_of_one_width():
    with pytest.raises(ValueError, match="exact_sq_dist needs"):
        exact_sq_dist(torch.randn(2, 3), torch.randn(2, 4))
    with pytest.raises(ValueError, match="exact_sq_dist needs"):
        exact_sq_dist(torch.randn(1, 2, 3), torch.randn(2, 3))
