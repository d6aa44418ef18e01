"""Squared Euclidean distances of every pair, each from its own difference: ``‖a_i − b_j‖² = Σ_k (a_ik − b_jk)²``.

sim_TN's matrix form (:class:`~st_magnitude.similarity.TNSimilarity`, L2Dir paper 002 eqs. 1 and 4) takes
‖a − b‖² from the law of cosines (eq. 2), which cancels for near-aligned pairs; those pairs are replaced by the
values computed here. Computing them for *every* pair, and selecting with ``torch.where``, keeps every shape
independent of the data: no ``nonzero`` whose size the host must wait for (a device sync on an accelerator).

The cost is an elementwise pass over ``B·M·n`` values, forward and backward, in row chunks of at most
:data:`CHUNK_ELEMENTS` values, so no ``[B, M, n]`` tensor is ever held: the backward recomputes each chunk's
differences instead of saving them. The gradient is the derivative of the same sum, ``∂/∂a_i = 2 Σ_j g_ij (a_i − b_j)``
and ``∂/∂b_j = −2 Σ_i g_ij (a_i − b_j)``, from the differences themselves (no cancellation either).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

__all__ = ["CHUNK_ELEMENTS", "exact_sq_dist"]

#: At most this many differences (``rows · M · n``) are formed at once.
CHUNK_ELEMENTS = 1 << 22


def _row_step(b: Tensor) -> int:
    return max(1, CHUNK_ELEMENTS // max(1, b.shape[0] * b.shape[1]))


class _ExactSqDist(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a: Tensor, b: Tensor) -> Tensor:
        ctx.save_for_backward(a, b)
        out = a.new_empty(a.shape[0], b.shape[0])
        step = _row_step(b)
        for start in range(0, a.shape[0], step):
            diff = a[start : start + step, None, :] - b[None]
            out[start : start + step] = (diff * diff).sum(-1)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, Tensor | None]:
        a, b = ctx.saved_tensors
        need_a, need_b = ctx.needs_input_grad
        grad_a = torch.zeros_like(a) if need_a else None
        grad_b = torch.zeros_like(b) if need_b else None
        step = _row_step(b)
        for start in range(0, a.shape[0], step):
            rows = slice(start, start + step)
            weighted = grad[rows, :, None] * (a[rows, None, :] - b[None])  # g_ij (a_i − b_j)
            if need_a:
                grad_a[rows] = 2.0 * weighted.sum(1)
            if need_b:
                grad_b -= 2.0 * weighted.sum(0)
        return grad_a, grad_b


def exact_sq_dist(a: Tensor, b: Tensor) -> Tensor:
    """``[B, n] x [M, n] -> [B, M]``: ``‖a_i − b_j‖²`` summed from the difference of every pair (see module doc)."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[-1] != b.shape[-1]:
        raise ValueError(f"exact_sq_dist needs [B, n] and [M, n] tensors, got {tuple(a.shape)} and {tuple(b.shape)}")
    return _ExactSqDist.apply(a, b)
