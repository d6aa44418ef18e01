"""Revela's in-batch attention on stock ``transformers`` (no fork), through its attention extension points.

Paper 004 (Revela, Cai et al.) §3.2 adds to every decoder layer of a causal LM an in-batch term: chunk ``i``'s
queries attend, without a causal mask, over every other chunk ``j``'s keys/values of a plain forward pass, and the
results are mixed with the retriever's similarities ``Sim[i, j]``::

    b_ij  = softmax(Q_i^h K_j^eᵀ / √d_H) V_j^e                               (paper eq. 5)
    b̃_ij  = b_ij / (N_ij + ε),  N_ij = softmax(Q_i^h K_j^eᵀ / √d_H) ‖V_j^e‖₂   (paper eq. 6, V-normalization)
    b_i   = Σ_{j≠i} Sim[i, j] · b̃_ij                                        (paper eq. 7)
    h_i   = s_i + b_i                                                        (paper eq. 8, s_i = causal self-attn)

How it is hooked in (verified on transformers 5.23, ``models/llama/modeling_llama.py``): every attention module of
Llama/Qwen2/Mistral-style models computes post-RoPE ``query [B, H, L, d]`` and pre-``repeat_kv`` ``key/value
[B, H_kv, L, d]`` and then calls ``ALL_ATTENTION_FUNCTIONS[config._attn_implementation](module, q, k, v, mask,
scaling=..., **kwargs)``, where ``kwargs`` are the extra keyword arguments given to the model's ``forward``. We
register one attention function, :data:`REVELA_ATTENTION`, that

* always computes the stock SDPA output ``s`` (so with no Revela state the LM is exactly the SDPA LM),
* in ``"record"`` mode (pass 1, the e-stream) also stores ``(key, value)`` of each layer, with their graph,
* in ``"in_batch"`` mode (pass 2, the h-stream) adds ``Σ_j Sim[i, j] b̃_ij`` to ``s`` before ``o_proj``.

The same name is registered in ``AttentionMaskInterface`` with the stock ``sdpa_mask``: without it,
``masking_utils._preprocess_mask_arguments`` returns no mask for an unknown implementation name, which would drop
the padding mask. This mirrors the official code's two-pass design (pass 1 caches K^e/V^e with
gradient, pass 2 adds the term in every layer, positions 0..L-1 in both passes).

Efficiency (our choice, all exact):

* ``b_ij`` and ``N_ij`` come out of ONE ``scaled_dot_product_attention`` call whose values are ``[V_j, ‖V_j‖]`` (the
  value norm is appended as an extra channel, so the same attention weights produce both the numerator and the
  V-norm denominator); the ``B·(B-1)·H·L·L`` attention matrix is never materialised by us;
* GQA: the query heads that share a KV head are stacked along the query axis instead of repeating K/V;
* pairs with ``Sim[i, j] = 0`` exactly are not computed — the diagonal always, and at the paper's τ = 1e-4 most
  off-diagonal pairs too (``exp`` underflows in fp32); their contribution to the loss and to every gradient that
  leaves the softmax is exactly zero (see :func:`in_batch_term`). The official code computes all ``B²`` pairs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

logger = logging.getLogger(__name__)

#: Name under which the Revela attention function and its mask function are registered in transformers.
REVELA_ATTENTION = "revela_sdpa"

#: Keyword argument (of the LM's ``forward``) that carries the :class:`RevelaAttentionState` down to the layers.
STATE_KWARG = "revela_state"

__all__ = [
    "REVELA_ATTENTION",
    "STATE_KWARG",
    "RevelaAttentionState",
    "active_pairs",
    "enable_revela_attention",
    "in_batch_term",
    "register_revela_attention",
    "revela_attention_forward",
]


@dataclass
class RevelaAttentionState:
    """Per-step state shared by all layers of one LM forward.

    Args:
        mode: ``"record"`` (pass 1: store each layer's post-RoPE key/value) or ``"in_batch"`` (pass 2: add the
            in-batch term). ``"off"`` runs plain SDPA (used by tests).
        sim: ``[B, B]`` row-stochastic similarity with a zero diagonal (``"in_batch"`` mode only).
        key_mask: ``[B, L]`` bool, True for real (non-padding) tokens of each chunk's keys.
        v_norm: divide ``b_ij`` by ``N_ij + eps`` (paper eq. 6).
        eps: ε of eq. 6 (official code: 1e-6).
        kv: layer index → ``(key, value)`` of pass 1, ``[B, H_kv, L, d]`` each (filled in ``"record"`` mode).
        capture: if not None, ``"in_batch"`` mode stores per layer the full ``b̃`` tensor ``[B, B, H, L, d]``
            (diagonal pairs zero) under ``capture[layer_idx]`` — for tests and diagnostics only (memory heavy).
        checkpoint: recompute the in-batch term in backward instead of keeping its B·(B-1)-pair intermediates
            (``torch.utils.checkpoint``): less memory, one more in-batch forward per layer.
    """

    mode: str = "record"
    sim: Tensor | None = None
    key_mask: Tensor | None = None
    v_norm: bool = True
    eps: float = 1e-6
    kv: dict[int, tuple[Tensor, Tensor]] = field(default_factory=dict)
    capture: dict[int, Tensor] | None = None
    checkpoint: bool = False
    skip_zero_pairs: bool = True
    pair_index: tuple[Tensor, Tensor] | None = None
    _pairs_of: Tensor | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.mode not in ("record", "in_batch", "off"):
            raise ValueError(
                f"RevelaAttentionState.mode must be one of 'record', 'in_batch', 'off'; got {self.mode!r}"
            )


def active_pairs(
    sim: Tensor, skip_zero_pairs: bool = True, device: torch.device | None = None
) -> tuple[Tensor, Tensor]:
    """Row and column indices of the ordered pairs ``(i, j)``, ``i ≠ j``, that :func:`in_batch_term` computes.

    With ``skip_zero_pairs`` the pairs with ``Sim[i, j] == 0`` are left out (see :func:`in_batch_term`): a
    ``nonzero``, so one host read; without it every pair is listed from the shape alone (no read).
    """
    bsz = sim.shape[0]
    device = sim.device if device is None else device
    if skip_zero_pairs:  # as many pairs as Sim has nonzero weights: the host waits for the device (one read)
        active = ~torch.eye(bsz, dtype=torch.bool, device=device) & (sim.detach().to(device) != 0)
        return active.nonzero(as_tuple=True)
    # every i ≠ j, row by row (the order nonzero gives), built from the shape alone: no host read
    rows = torch.arange(bsz, device=device).repeat_interleave(max(bsz - 1, 0))
    cols = torch.arange(max(bsz - 1, 0), device=device).repeat(bsz)
    return rows, cols + (cols >= rows).long()


def in_batch_term(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    sim: Tensor,
    key_mask: Tensor | None,
    scaling: float,
    v_norm: bool = True,
    eps: float = 1e-6,
    return_pairs: bool = False,
    skip_zero_pairs: bool = True,
    pair_index: tuple[Tensor, Tensor] | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """``b_i = Σ_{j≠i} Sim[i, j] · b̃_ij`` for all chunks ``i`` at once (paper eqs. 5–7).

    Args:
        query: ``[B, H, L, d]`` h-stream queries (post-RoPE) of pass 2.
        key: ``[B, H_kv, L, d]`` e-stream keys (post-RoPE) of pass 1; ``H % H_kv == 0`` (GQA).
        value: ``[B, H_kv, L, d]`` e-stream values of pass 1.
        sim: ``[B, B]`` similarity weights (diagonal ignored: pairs ``j = i`` are not computed).
        key_mask: ``[B, L]`` bool, False at padding keys of chunk ``j`` (no causal mask: eq. 5 is full).
        scaling: ``1/√d_H`` (the module's ``scaling``).
        v_norm: apply eq. 6.
        eps: ε of eq. 6.
        return_pairs: also return ``b̃`` as ``[B, B, H, L, d]`` (zeros on the diagonal; every off-diagonal pair is
            computed, whatever its weight).
        skip_zero_pairs: do not compute pairs whose weight ``Sim[i, j]`` is exactly 0. Exact for the output, and for
            every gradient when ``sim`` comes out of a softmax (as in :class:`~st_magnitude.losses.revela.
            RevelaLoss`): the softmax's Jacobian row ``∂Sim[i, j]/∂logits`` is ``Sim[i, j]·(δ − Sim[i, ·])`` = 0, so
            nothing upstream of ``sim`` receives gradient from such a pair. Only ``sim.grad`` itself differs at those
            entries (left 0). With the paper's τ = 1e-4 most pairs are exactly 0 in fp32 (``exp`` underflows once
            the cosine gap to the row's best exceeds ≈ 0.0104): on SciFact BM25 groups of 16 with all-MiniLM-L6-v2,
            about 18 of the 240 pairs remain.
        pair_index: the ``(i, j)`` pairs to compute, as returned by :func:`active_pairs` for this ``sim`` (computed
            here when None). Passing it avoids one host-device synchronisation per layer on GPU.

    Returns:
        ``[B, H, L, d]`` (and ``b̃`` if ``return_pairs``).
    """
    bsz, n_heads, length, dim = query.shape
    if key.shape[0] != bsz or value.shape[0] != bsz:
        raise ValueError(f"in-batch keys/values must have the batch size of the queries ({bsz}); got {key.shape[0]}")
    n_kv = key.shape[1]
    if n_heads % n_kv != 0:
        raise ValueError(f"query heads ({n_heads}) must be a multiple of key/value heads ({n_kv})")
    n_rep = n_heads // n_kv
    if v_norm:
        # eq. 6: append ‖V_j[t]‖₂ (norm over the head dim) as an extra value channel; the same softmax weights then
        # give N_ij[q] = Σ_t a_qt ‖V_j[t]‖ in that channel.
        value = torch.cat([value, value.norm(dim=-1, keepdim=True)], dim=-1)
    # GQA without repeat_kv: query head h uses KV head h // n_rep (transformers' repeat_kv order), so the n_rep query
    # heads of one KV head are stacked along the query axis. Exact, because eq. 5 has no causal mask: every query
    # row is an independent softmax over chunk j's keys.
    grouped = query.reshape(bsz, n_kv, n_rep * length, dim)

    # ordered pairs i != j (Sim[i, i] = 0 exactly, so the diagonal contributes nothing); see skip_zero_pairs
    if pair_index is None or return_pairs:
        pair_index = active_pairs(sim, skip_zero_pairs and not return_pairs, device=query.device)
    idx_i, idx_j = pair_index
    result = torch.zeros_like(grouped)
    if idx_i.numel() > 0:
        mask = None
        if key_mask is not None:
            mask = key_mask.to(device=query.device, dtype=torch.bool)[idx_j][:, None, None, :]  # [P, 1, 1, L]
        # eq. 5: full (non-causal) softmax over chunk j's keys
        # index_select, not x[idx]: its backward is an index_add, faster than advanced indexing's index_put
        out = F.scaled_dot_product_attention(
            grouped.index_select(0, idx_i),
            key.index_select(0, idx_j),
            value.index_select(0, idx_j),
            attn_mask=mask,
            scale=scaling,
        )
        b_tilde = out[..., :dim] / (out[..., dim:] + eps) if v_norm else out
        weights = sim[idx_i, idx_j].to(device=query.device, dtype=b_tilde.dtype)  # eq. 7
        result = result.index_add(0, idx_i, weights[:, None, None, None] * b_tilde)
    result = result.view(bsz, n_heads, length, dim)
    if not return_pairs:
        return result
    pairs = query.new_zeros(bsz, bsz, n_heads, length, dim)
    if idx_i.numel() > 0:
        pairs[idx_i, idx_j] = b_tilde.reshape(-1, n_heads, length, dim)
    return result, pairs


def revela_attention_forward(
    module: torch.nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[Tensor, Tensor | None]:
    """Attention function registered as :data:`REVELA_ATTENTION` (same signature as transformers' SDPA one).

    Returns ``attn_output [B, L, H, d]`` (transformers' layout) and ``None`` weights.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    state: RevelaAttentionState | None = kwargs.pop(STATE_KWARG, None)
    # paper eq. 3-4 / s_i of eq. 8: the stock causal self-attention over the chunk's own prefix
    out, weights = sdpa_attention_forward(
        module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
    )
    if state is None or state.mode == "off":
        return out, weights
    layer_idx = getattr(module, "layer_idx", None)
    if layer_idx is None:
        raise ValueError("Revela attention needs attention modules with a `layer_idx` attribute (Llama/Qwen2-style)")
    if state.mode == "record":
        # Not when a checkpointed layer is replayed in backward (gradient checkpointing of the LM): the forward's
        # tensors are the ones in the graph, and the replay's copies would only be kept alive until backward ends.
        if torch._C._current_graph_task_id() == -1 or layer_idx not in state.kv:
            state.kv[layer_idx] = (key, value)
        return out, weights
    if layer_idx not in state.kv:
        raise RuntimeError(f"no recorded pass-1 keys/values for layer {layer_idx}: run the 'record' pass first")
    if state.sim is None:
        raise ValueError("RevelaAttentionState.sim must be set in 'in_batch' mode")
    k_e, v_e = state.kv[layer_idx]
    if state.pair_index is None or state._pairs_of is not state.sim:
        state.pair_index = active_pairs(state.sim, state.skip_zero_pairs, device=query.device)
        state._pairs_of = state.sim
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    args = (query, k_e, v_e, state.sim, state.key_mask, scale, state.v_norm, state.eps)
    kwargs = dict(
        return_pairs=state.capture is not None, skip_zero_pairs=state.skip_zero_pairs, pair_index=state.pair_index
    )
    if state.checkpoint and state.capture is None and torch.is_grad_enabled():
        from torch.utils.checkpoint import checkpoint

        term = checkpoint(in_batch_term, *args, use_reentrant=False, **kwargs)
    else:
        term = in_batch_term(*args, **kwargs)
    if state.capture is not None:
        term, pairs = term
        state.capture[layer_idx] = pairs.detach()
    # eq. 8: h_i = s_i + b_i, before o_proj; transformers' layout is [B, L, H, d]
    return out + term.transpose(1, 2).to(out.dtype), weights


def register_revela_attention() -> None:
    """Register :data:`REVELA_ATTENTION` in transformers' attention and mask interfaces (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(REVELA_ATTENTION, revela_attention_forward)
    AttentionMaskInterface.register(REVELA_ATTENTION, sdpa_mask)


SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "mistral", "qwen3")


def enable_revela_attention(lm: torch.nn.Module) -> None:
    """Switch a causal LM (or a ``peft`` wrapper of one) to the Revela attention function.

    With no ``revela_state`` passed to ``forward`` the LM computes exactly what it computed with ``"sdpa"``.

    Raises:
        ValueError: if the LM's architecture is not one whose attention modules were verified
            (model types: llama, qwen2, mistral, qwen3).
    """
    register_revela_attention()
    config = getattr(lm, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(
            f"RevelaLoss supports causal LMs with model_type in {SUPPORTED_MODEL_TYPES}; got {model_type!r}"
        )
    if config._attn_implementation == REVELA_ATTENTION:
        return
    base = lm.get_base_model() if hasattr(lm, "get_base_model") else lm
    base.set_attn_implementation(REVELA_ATTENTION)
    logger.info("LM attention switched from SDPA to %s", REVELA_ATTENTION)
