"""What InfoTN and L2Dir (paper 002) share: the NAP-tapped loss base, its cached twin, the length statistics.

Both losses read the backbone's *un-normalized* state through a :class:`~st_magnitude.modules.nap_head.NAPInputTap`
(``nap_input``), optionally project it with a :class:`~st_magnitude.modules.nap_head.NAPHead`, and keep the
positive-pair length statistics of paper 002 §5.1. :class:`NAPLoss` is that part of the contract on top of
:class:`~st_magnitude.losses._common.FamilyLoss`; :class:`CachedNAPLoss` is the GradCache twin of both: it caches the
tapped state (and, for L2Dir, the embedding next to it) so both get a cached gradient.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from st_magnitude.losses._batch import check_columns, feature_rows
from st_magnitude.losses._common import CachedLoss, FamilyLoss
from st_magnitude.losses._loss_state import forward_cached_scaled, sync_loss_held_gradients
from st_magnitude.losses._stats import BatchStats, read_stats
from st_magnitude.modules.nap_head import NAPHead, NAPInputTap, modality_key

logger = logging.getLogger(__name__)

__all__ = ["L2DIR_CITATION", "CachedNAPLoss", "NAPLoss", "default_nap_head", "length_stats", "read_stats"]


L2DIR_CITATION = """
@inproceedings{zong2026l2dir,
    title = {L2Dir: Integrating L2-Norm and Directional Alignment for Unsupervised Contrastive Representation
             Learning in Multimodal Retrieval},
    author = {Zong, Tianyu and Dai, Rui and Yi, Hongzhu and Wang, Yuanxiang and Zhang, Zhenghao and Guan, Zhenyu
              and Yang, Yujia and Shi, Bingkang and Ding, Yueyang and Chu, Xiangxiang and Liu, Kaikui
              and Xu, Jungang},
    booktitle = {Proceedings of the 64th Annual Meeting of the Association for Computational Linguistics (ACL)},
    year = {2026},
}
"""


def length_stats(anchor: Tensor, positive: Tensor) -> dict[str, Tensor]:
    """Positive-pair length ratio ‖a‖/‖p‖ (the quantity the paper tracks in §5.1 / Fig. 5), as 0-d tensors on the
    inputs' device: nothing is read on the host here (see :meth:`NAPLoss.pop_stats`)."""
    with torch.no_grad():
        a = torch.linalg.vector_norm(anchor.detach().float(), dim=-1)
        p = torch.linalg.vector_norm(positive.detach().float(), dim=-1).clamp_min(1e-12)
        ratio = a / p
        return {
            "length_ratio_mean": ratio.mean(),
            "length_ratio_std": ratio.std() if ratio.numel() > 1 else ratio.new_zeros(()),
            "anchor_norm_mean": a.mean(),
            "positive_norm_mean": p.mean(),
        }


def default_nap_head(model: nn.Module, tap: NAPInputTap, hidden_features: int | None = None) -> NAPHead:
    """A fresh head from the tapped width to itself (per modality: to the embedding width), on the model's device."""
    widths = tap.in_features()
    out = None
    if isinstance(widths, dict):
        out = model.get_embedding_dimension() if hasattr(model, "get_embedding_dimension") else None
        out = out or model.get_sentence_embedding_dimension()
    head = NAPHead(widths, out_features=out, hidden_features=hidden_features)
    device = next((p.device for p in model.parameters()), None)
    return head.to(device) if device is not None else head


class NAPLoss(BatchStats, FamilyLoss):
    """A loss on the un-normalized state tapped at ``nap_input`` (InfoTN; L2Dir adds InfoNCE on the embedding).

    :meth:`embed` returns the keyword arguments of ``compute_loss_from_embeddings``: ``embeddings`` (the model's
    embeddings when :attr:`uses_embedding`, else the tapped states), ``nap_inputs`` (the tapped states, only when
    :attr:`uses_embedding`) and ``modalities``. The latest batch statistics are kept in ``last_stats`` and averaged
    since the last read by :meth:`pop_stats` (logged by :class:`~st_magnitude.callbacks.LossStatsCallback` under
    ``stats_prefix``).
    """

    resolves_similarity = False
    #: the loss also scores the model's (normalized) embedding, next to the tapped state (L2Dir's InfoNCE part)
    uses_embedding: bool = False
    stats_prefix = "l2dir_"
    #: none: sim_TN's matrix form recomputes its near-aligned pairs on the device, selected with ``torch.where``
    #: (:class:`~st_magnitude.similarity.TNSimilarity`); the length statistics are read only when logged
    host_reads_per_step = 0

    def __init__(
        self,
        model: nn.Module,
        nap_input: str,
        final_norm: str | dict[str, str] | None,
        eps: float,
        gather_across_devices: bool = False,
    ) -> None:
        super().__init__(model, gather_across_devices=gather_across_devices)
        self.eps = float(eps)
        self.tap = NAPInputTap(model, nap_input=nap_input, final_norm=final_norm)

    def check_features(
        self, sentence_features: Iterable[dict[str, Any]], loss_name: str | None = None
    ) -> list[dict[str, Any]]:
        features = [dict(f) for f in sentence_features]  # a BatchEncoding output is no dict for the tap
        check_columns([feature_rows(f) for f in features], loss_name or type(self).__name__)
        return features

    def embed(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        embeddings, states = [], []
        for f in features:
            emb, state = self.tap.embed(f, self.model)
            embeddings.append(emb)
            states.append(state)
        modalities = [modality_key(f.get("modality")) for f in features]
        if self.uses_embedding:
            return {"embeddings": embeddings, "nap_inputs": states, "modalities": modalities}
        return {"embeddings": states, "modalities": modalities}

    def project(self, states: list[Tensor], modalities: list[str] | None) -> list[Tensor]:
        """The NAP outputs PO of the per-column ``states`` (the states themselves without a head)."""
        head = self.nap_head
        if head is None:
            return list(states)
        modalities = modalities or ["text"] * len(states)
        return [head.project(x, m) for x, m in zip(states, modalities)]

    @property
    def citation(self) -> str:
        return L2DIR_CITATION


class CachedNAPLoss(CachedLoss):
    """The GradCache twin of a :class:`NAPLoss`: same loss and gradients in bounded backbone memory.

    Each mini-batch is embedded once without gradients; the cached quantity per input is the tapped state, or
    ``[embedding, tapped state]`` concatenated when the loss also scores the embedding, so step (2) caches the
    gradient of every part the loss reads and step (3) back-propagates all of them into the backbone. The loss over
    the batch is the plain loss's ``compute_loss_from_embeddings`` in one piece (``B × B`` logits), so
    ``mini_batch_size`` bounds the backbone's activations only. A head held by the plain loss gets its gradient in
    step (2), handed back through the returned loss (:func:`forward_cached_scaled`). A loss that returns named parts
    (L2Dir) returns them from the cached twin too.
    """

    def __init__(
        self,
        loss: NAPLoss,
        mini_batch_size: int,
        mini_batch_num_tokens: int | None = None,
        show_progress_bar: bool = False,
    ) -> None:
        super().__init__(loss, mini_batch_size, mini_batch_num_tokens, show_progress_bar)
        self._call: _CachedCall | None = None

    def embed_minibatch(self, sentence_feature, begin, end, with_grad, copy_random_state, random_state=None):
        """Embed one mini-batch; return the tapped state (after the embedding when the loss uses it)."""
        with self.loss.tap.capturing():
            reps, random_state = super().embed_minibatch(
                sentence_feature, begin, end, with_grad, copy_random_state, random_state
            )
            _, state = self.loss.tap.collect()
        if not self.loss.uses_embedding:
            return state, random_state
        if self._call is not None:  # step (1); step (3) re-embeds during backward, after forward has returned
            self._call.embedding_width = reps.shape[-1]
        return torch.cat([reps, state.to(reps.dtype)], dim=-1), random_state

    def calculate_loss(
        self, reps: list[list[Tensor]], labels: Tensor | None = None, *, with_backward: bool = False
    ) -> Tensor:
        """The plain loss's ``compute_loss_from_embeddings`` over the whole batch, on the cached columns."""
        call = self._call
        columns = [torch.cat(r) for r in reps]
        if self.loss.uses_embedding:
            d = call.embedding_width
            inputs = {"embeddings": [c[:, :d] for c in columns], "nap_inputs": [c[:, d:] for c in columns]}
        else:
            inputs = {"embeddings": columns}
        out = self.loss.compute_loss_from_embeddings(**inputs, labels=labels, modalities=call.modalities)
        parts = dict(out) if isinstance(out, dict) else None
        loss = sum(parts.values()) if parts is not None else out
        if with_backward:
            loss.backward()
            loss = loss.detach()
            parts = None if parts is None else {k: v.detach() for k, v in parts.items()}
        call.parts = parts
        return loss

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None) -> Any:
        features = self.loss.check_features(sentence_features, type(self).__name__)
        self._call = _CachedCall(modalities=[modality_key(f.get("modality")) for f in features])
        try:
            sync_loss_held_gradients(self)
            loss = forward_cached_scaled(self, features, labels)
            parts = self._call.parts
        finally:
            self._call = None
        if parts is None:
            return loss
        # Split the hooked total into the parts for logging; they add up to `loss` and every gradient reaches its
        # hook (the weights add up to 1).
        # Computed on the device (no host read): each part's share of the total, equal shares when it is 0.
        values = [v.detach() for v in parts.values()]
        total = sum(values)
        nonzero = total != 0
        safe_total = torch.where(nonzero, total, torch.ones_like(total))
        weights = [torch.where(nonzero, v / safe_total, 1.0 / len(values)) for v in values[:-1]]
        weights.append(1.0 - sum(weights))
        return {key: loss * w for key, w in zip(parts, weights)}


@dataclass
class _CachedCall:
    """What one :meth:`CachedNAPLoss.forward` call hands from its steps to the next (dropped when it returns)."""

    modalities: list[str]
    embedding_width: int | None = None
    parts: dict[str, Tensor] | None = None
