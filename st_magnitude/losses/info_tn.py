"""InfoNCE and InfoTN (paper 002 eqs. 4–7): the functional losses, InfoTNLoss, and the shared temperature checks."""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from st_magnitude.losses._batch import check_columns, check_finite, check_has_negatives, feature_rows
from st_magnitude.losses._loss_state import sync_loss_held_gradients
from st_magnitude.modules.nap_head import NAPHead, NAPInputTap, modality_key
from st_magnitude.similarity import get_similarity

logger = logging.getLogger(__name__)

__all__ = ["InfoTNCollapseWarning", "InfoTNLoss", "info_nce_loss", "info_tn_loss"]


_CITATION = """
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


class InfoTNCollapseWarning(UserWarning):
    """InfoTN without a directional InfoNCE term collapses (paper 002 Table 2: Recall@1 3.3 vs 63.7)."""


def _check_temperature(name: str, value: float) -> float:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive finite float (scale = 1/{name}), got {value!r}")
    return float(value)


def _in_batch_labels(n_anchors: int, n_candidates: int, device: torch.device, labels: Tensor | None) -> Tensor:
    if labels is not None:
        return labels
    if n_candidates < n_anchors:
        raise ValueError(f"need at least as many candidates as anchors, got {n_candidates} < {n_anchors}")
    return torch.arange(n_anchors, device=device)


def info_nce_loss(anchors: Tensor, candidates: Tensor, temperature: float, labels: Tensor | None = None) -> Tensor:
    """Eq. 6: cross-entropy over cos(anchor_i, candidate_j)/τ; candidate ``labels[i]`` (default i) is the positive.

    Identical to sentence-transformers' ``MultipleNegativesRankingLoss(scale=1/τ)`` (the default cosine).
    """
    logits = get_similarity("cosine")(anchors, candidates) / temperature
    return F.cross_entropy(logits, _in_batch_labels(len(anchors), len(candidates), logits.device, labels))


def info_tn_loss(
    anchors: Tensor, candidates: Tensor, temperature: float, eps: float = 1e-8, labels: Tensor | None = None
) -> Tensor:
    """Eq. 7: cross-entropy over sim_TN(anchor_i, candidate_j)/τ_TN on *un-normalized* vectors (fp32)."""
    logits = get_similarity("tn", eps=eps)(anchors, candidates) / temperature
    return F.cross_entropy(logits, _in_batch_labels(len(anchors), len(candidates), logits.device, labels))


def _length_stats(anchor: Tensor, positive: Tensor) -> dict[str, float]:
    """Positive-pair length ratio ‖a‖/‖p‖ (the quantity the paper tracks in §5.1 / Fig. 5)."""
    with torch.no_grad():
        a = torch.linalg.vector_norm(anchor.float(), dim=-1)
        p = torch.linalg.vector_norm(positive.float(), dim=-1).clamp_min(1e-12)
        ratio = a / p
        return {
            "length_ratio_mean": float(ratio.mean()),
            "length_ratio_std": float(ratio.std()) if ratio.numel() > 1 else 0.0,
            "anchor_norm_mean": float(a.mean()),
            "positive_norm_mean": float(p.mean()),
        }


class _StatsMixin:
    """Keeps the latest batch statistics and an average since the last read (logged by
    :class:`~st_magnitude.callbacks.LossStatsCallback` under ``stats_prefix``)."""

    stats_prefix = "l2dir_"

    def _record_stats(self, stats: dict[str, float]) -> None:
        self.last_stats = dict(stats)
        accum = self.__dict__.setdefault("_stats_accum", {})
        for key, value in stats.items():
            total, count = accum.get(key, (0.0, 0))
            accum[key] = (total + value, count + 1)
        logger.debug("L2Dir batch stats: %s", stats)

    def pop_stats(self) -> dict[str, float]:
        """Average of the statistics recorded since the last call (and reset)."""
        accum = self.__dict__.get("_stats_accum", {})
        out = {key: total / count for key, (total, count) in accum.items() if count}
        self.__dict__["_stats_accum"] = {}
        return out


def _warn_if_not_cosine_served(model: nn.Module) -> None:
    from sentence_transformers.base.modules import Normalize

    name = getattr(model, "similarity_fn_name", None)
    if name not in (None, "cosine") and not any(isinstance(m, Normalize) for m in model.modules()):
        warnings.warn(
            f"The model serves similarity {name!r} without a Normalize module, but L2Dir trains a cosine InfoNCE "
            "and retrieves with cosine (paper 002 §5.4). Set model.similarity_fn_name = 'cosine' (or keep a "
            "Normalize) so that retrieval uses what was trained.",
            UserWarning,
            stacklevel=3,
        )


def _default_head(model: nn.Module, tap: NAPInputTap, hidden_features: int | None = None) -> NAPHead:
    widths = tap.in_features()
    out = None
    if isinstance(widths, dict):
        out = model.get_embedding_dimension() if hasattr(model, "get_embedding_dimension") else None
        out = out or model.get_sentence_embedding_dimension()
    head = NAPHead(widths, out_features=out, hidden_features=hidden_features)
    device = next((p.device for p in model.parameters()), None)
    return head.to(device) if device is not None else head


def _project(head: NAPHead | None, states: list[Tensor], modalities: list[str] | None) -> list[Tensor]:
    if head is None:
        return list(states)
    modalities = modalities or ["text"] * len(states)
    return [head.project(x, m) for x, m in zip(states, modalities)]


class InfoTNLoss(_StatsMixin, nn.Module):
    def __init__(
        self,
        model: nn.Module,
        temperature: float = 0.01,
        nap_head: NAPHead | bool | None = None,
        nap_input: str = "auto",
        final_norm: str | dict[str, str] | None = None,
        eps: float = 1e-8,
        warn_collapse: bool = True,
    ) -> None:
        """InfoTN: in-batch softmax cross-entropy with logits sim_TN/τ_TN on un-normalized vectors (L2Dir eqs. 4, 7).

        sim_TN(q, t) = 1 − ‖q − t‖/(‖q‖ + ‖t‖) ∈ [0, 1] rewards the same direction *and* the same length, so the
        softmax ranks candidates by a joint direction-and-norm agreement. The vectors are the backbone's
        un-normalized state (see ``nap_input``), optionally passed through a NAP head first.

        **Used alone, it collapses**: the paper's ablation (Table 2) gets Recall@1 3.3 with InfoTN only versus 63.7
        with InfoNCE only. A :class:`InfoTNCollapseWarning` is raised on construction; use :class:`L2DirLoss`,
        which adds the directional InfoNCE term (paper eq. 8).

        Args:
            model: a SentenceTransformer.
            temperature: τ_TN; logits are sim_TN/τ_TN (paper: 0.01 for VLM2Vec-V2, 0.02 for UniIR/CLIP).
            nap_head: ``None``/``False`` — InfoTN on the raw tapped state (the paper's "w/o NAP" ablation, App. F);
                ``True`` — a fresh ``NAPHead`` (Linear d → d); or a :class:`~st_magnitude.modules.NAPHead`.
                A head held here is *not* saved by sentence-transformers: add
                :class:`~st_magnitude.callbacks.LossStateCallback` to the trainer.
            nap_input: where the un-normalized vectors come from: ``auto``, ``pre_final_norm``, ``pre_normalize``,
                ``output`` (see :mod:`st_magnitude.modules.nap_head`).
            final_norm: dotted path(s) of the final norm for ``pre_final_norm`` (default: looked up).
            eps: smoothing inside the square roots of sim_TN.
            warn_collapse: set False to silence the collapse warning (e.g. when you add your own InfoNCE term).

        References:
            - L2Dir: Integrating L2-Norm and Directional Alignment for Unsupervised Contrastive Representation
              Learning in Multimodal Retrieval (Zong et al., ACL 2026), eqs. 1–7 and Table 2.

        Requirements:
            1. (anchor, positive) pairs or (anchor, positive, negative_1, ..., negative_n) tuples.

        Inputs:
            +-------------------------------------------------+--------+
            | Inputs                                          | Labels |
            +=================================================+========+
            | (anchor, positive) pairs                        | none   |
            +-------------------------------------------------+--------+
            | (anchor, positive, negative_1, ..., negative_n) | none   |
            +-------------------------------------------------+--------+

        Recommendations:
            - Do not train with this loss alone; use :class:`L2DirLoss`.

        Relations:
            - :class:`L2DirLoss` = λ·InfoNCE + (1−λ)·this loss on a NAP head.

        Example:
            ::

                import warnings
                from sentence_transformers import SentenceTransformer
                from st_magnitude.losses.info_tn import InfoTNLoss, InfoTNCollapseWarning

                model = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2")
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", InfoTNCollapseWarning)  # an ablation, on purpose
                    loss = InfoTNLoss(model, temperature=0.01)
        """
        super().__init__()
        self.model = model
        self.temperature = _check_temperature("temperature", temperature)
        self.eps = float(eps)
        self.tap = NAPInputTap(model, nap_input=nap_input, final_norm=final_norm)
        if nap_head is True:
            nap_head = _default_head(model, self.tap)
        elif nap_head is False:
            nap_head = None
        if nap_head is not None and not isinstance(nap_head, NAPHead):
            raise ValueError(f"nap_head must be None, a bool or a NAPHead, got {type(nap_head).__name__}")
        self.nap_head = nap_head
        if nap_head is None and isinstance(self.tap.in_features(), dict):
            raise ValueError(
                "the tapped states differ in width per modality; InfoTN needs one space: pass nap_head=True or a "
                "NAPHead with out_features set"
            )
        if warn_collapse:
            warnings.warn(
                "InfoTNLoss used without an InfoNCE term: the L2Dir paper's ablation collapses with InfoTN alone "
                "(Table 2: Recall@1 3.3 vs 63.7 for InfoNCE). Use L2DirLoss (λ·InfoNCE + (1−λ)·InfoTN) instead.",
                InfoTNCollapseWarning,
                stacklevel=2,
            )

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None) -> Tensor:
        sentence_features = [dict(f) for f in sentence_features]  # a BatchEncoding output is no dict for the tap
        check_columns([feature_rows(f) for f in sentence_features], type(self).__name__)
        states = [self.tap.embed(f, self.model)[1] for f in sentence_features]
        modalities = [modality_key(f.get("modality")) for f in sentence_features]
        sync_loss_held_gradients(self)
        return self.compute_loss_from_embeddings(states, labels, modalities=modalities)

    def compute_loss_from_embeddings(
        self, embeddings: list[Tensor], labels: Tensor | None = None, modalities: list[str] | None = None
    ) -> Tensor:
        """InfoTN on per-column un-normalized states ``embeddings`` (NAP applied first when a head is set)."""
        name = type(self).__name__
        check_columns([e.size(0) for e in embeddings], name)
        check_finite(list(embeddings), name, "un-normalized states")
        check_has_negatives(embeddings[0].size(0), len(embeddings) - 1, name)
        vectors = _project(self.nap_head, embeddings, modalities)
        self._record_stats(_length_stats(vectors[0], vectors[1]))
        return info_tn_loss(vectors[0], torch.cat(vectors[1:]), self.temperature, self.eps)

    def get_config_dict(self) -> dict[str, Any]:
        return {
            "temperature": self.temperature,
            "nap_input": self.tap.nap_input,
            "nap_head": None if self.nap_head is None else self.nap_head.get_config_dict(),
        }

    @property
    def citation(self) -> str:
        return _CITATION
