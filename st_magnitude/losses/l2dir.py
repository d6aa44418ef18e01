"""L2Dir (paper 002, Zong et al., ACL 2026): InfoTN loss, and λ·InfoNCE + (1−λ)·InfoTN on a NAP head.

Built from the paper's equations, never from the authors' release, which does not implement
eq. 8, has no NAP and drops the NAP-side gradient under GradCache.

    sim_TN(q, t)  = 1 − ‖q − t‖ / (‖q‖ + ‖t‖)                                  eqs. 1, 4   (similarity "tn")
    L_NCE         = −log softmax_j( cos(LHS_q, LHS_t^j) / τ )[+]                eq. 6
    L_InfoTN      = −log softmax_j( sim_TN(PO_q, PO_t^j) / τ_TN )[+]            eq. 7
    L_L2Dir       = λ · L_NCE + (1 − λ) · L_InfoTN,     PO = NAP(h_raw)          eq. 8

The softmax runs over every in-batch candidate 𝔻 (the positives of all anchors, then any extra negative
columns), query → target only, as in the paper. Retrieval keeps using the normalized embedding (cosine); the NAP
is a training-time head (paper §5.4).
"""

from __future__ import annotations

import logging
import math
import os
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from st_magnitude.losses._common import (
    CachedLoss,
    check_columns,
    check_finite,
    check_has_negatives,
    feature_rows,
    forward_cached_scaled,
    gather_columns,
    sync_loss_held_gradients,
)
from st_magnitude.losses._temperature import (
    LearnableScale,
    parse_temperature,
    scale_value,
    temperature_config,
    temperature_tensor,
)
from st_magnitude.modules.nap_head import NAP_INPUTS, NAPHead, NAPInputTap, modality_key
from st_magnitude.similarity import get_similarity

logger = logging.getLogger(__name__)

__all__ = [
    "NAP_HEAD_DIRNAME",
    "PAPER_TEMPERATURES",
    "InfoTNCollapseWarning",
    "InfoTNLoss",
    "L2DirLoss",
    "CachedL2DirLoss",
    "info_nce_loss",
    "info_tn_loss",
    "load_nap_head",
    "save_nap_head",
]

#: The paper's two temperature settings (App. C). They are swapped between the frameworks.
PAPER_TEMPERATURES: dict[str, dict[str, float]] = {
    "vlm": {"temperature": 0.02, "tn_temperature": 0.01},  # VLM2Vec-V2 (Qwen2-VL, GME)
    "clip": {"temperature": 0.01, "tn_temperature": 0.02},  # UniIR (CLIP-B/L)
}

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


def info_nce_loss(
    anchors: Tensor, candidates: Tensor, temperature: float | Tensor, labels: Tensor | None = None
) -> Tensor:
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
                from st_magnitude.losses.l2dir import InfoTNLoss, InfoTNCollapseWarning

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


class L2DirLoss(_StatsMixin, nn.Module):
    def __init__(
        self,
        model: nn.Module,
        lambda_: float = 0.5,
        temperature: float | str = 0.02,
        tn_temperature: float = 0.01,
        nap_head: NAPHead | None = None,
        nap_input: str = "auto",
        final_norm: str | dict[str, str] | None = None,
        nap_hidden_features: int | None = None,
        eps: float = 1e-8,
        gather_across_devices: bool = False,
    ) -> None:
        """L2Dir: λ·InfoNCE(cosine on the embedding, τ) + (1−λ)·InfoTN(NAP output, τ_TN) (paper 002 eq. 8).

        The directional term is the usual in-batch InfoNCE on the model's embedding compared by cosine (identical
        to ``MultipleNegativesRankingLoss(scale=1/τ)``). The magnitude term feeds the backbone's *un-normalized*
        state through a trainable Norm Alignment Projector (NAP, default ``Linear(d, d)``) and applies InfoTN, a
        softmax over sim_TN(q, t) = 1 − ‖q − t‖/(‖q‖ + ‖t‖) / τ_TN, to its never-normalized output PO. The
        backbone gets the InfoTN gradient through the NAP input; retrieval stays cosine and does not use the NAP.

        Returns a dict ``{"infonce": λ·L_NCE, "infotn": (1−λ)·L_InfoTN}``: the trainer sums it (eq. 8) and logs
        both parts. The positive-pair PO length ratio ‖PO_q‖/‖PO_t‖ (paper §5.1) is kept in ``last_stats`` and
        logged by :class:`~st_magnitude.callbacks.LossStatsCallback`.

        Args:
            model: a SentenceTransformer (text, decoder or CLIP-style).
            lambda_: λ ∈ [0, 1], the InfoNCE weight (paper: 0.5 everywhere; its sweep 0.1–0.9 all beat InfoNCE).
            temperature: τ of InfoNCE. Paper settings (:data:`PAPER_TEMPERATURES`): VLM2Vec-V2 τ = 0.02,
                UniIR/CLIP τ = 0.01. (ST's MNRL default is 0.05.) ``"learnable"``: a CLIP-style log-parameterised τ
                held by the loss (parameter ``temperature.log_scale``), starting at 0.02, clamped to τ ≥ 0.01.
            tn_temperature: τ_TN of InfoTN. Paper: VLM2Vec-V2 0.01, UniIR/CLIP 0.02.
            nap_head: a :class:`~st_magnitude.modules.NAPHead`; default: ``NAPHead(d_in, d_in)`` with d_in the
                tapped width (for CLIP towers of different widths: one ``Linear(d_tower, d_embedding)`` per
                modality).
            nap_input: where the NAP reads from: ``auto`` (default: the hidden state entering the backbone's final
                norm for decoders/CLIP/ModernBERT, else the pooled embedding before ``Normalize``),
                ``pre_final_norm``, ``pre_normalize``, ``output``.
            final_norm: dotted path(s) of the final norm inside the Hugging Face model (``pre_final_norm``).
            nap_hidden_features: build the default head as a bottleneck d → h → d (e.g. 16) instead of a Linear.
            eps: smoothing inside the square roots of sim_TN.
            gather_across_devices: gather the candidates (embeddings and NAP outputs, with gradients) from all
                processes, so every anchor is scored against the global batch as in the paper (a global batch of
                1024 over its GPUs); the NAP head's gradients are averaged over processes like the model's.

        References:
            - L2Dir: Integrating L2-Norm and Directional Alignment for Unsupervised Contrastive Representation
              Learning in Multimodal Retrieval (Zong et al., ACL 2026), eqs. 4–8, §3.3, App. C and F.

        Requirements:
            1. (anchor, positive) pairs or (anchor, positive, negative_1, ..., negative_n) tuples.
            2. Add ``LossStateCallback(loss)`` to the trainer so the NAP head is saved with checkpoints and restored on
               resume (sentence-transformers saves and restores only the model, never loss parameters).

        Inputs:
            +-------------------------------------------------+--------+
            | Inputs                                          | Labels |
            +=================================================+========+
            | (anchor, positive) pairs                        | none   |
            +-------------------------------------------------+--------+
            | (anchor, positive, negative_1, ..., negative_n) | none   |
            +-------------------------------------------------+--------+

        Recommendations:
            - Keep λ = 0.5 (the paper's value); λ = 0 (InfoTN alone) collapses.
            - λ halves the InfoNCE gradient compared with plain MNRL at the same learning rate (the paper keeps the
              baseline learning rate).
            - Use ``BatchSamplers.NO_DUPLICATES`` as with any in-batch-negatives loss.
            - The NAP head is random at the start; give it its own learning rate with
              ``SentenceTransformerTrainingArguments(learning_rate_mapping={r"nap_head\\.": 1e-3})`` (the paper does
              not state the NAP's learning rate; at 2e-5 AdamW moves each weight by ≤ ~2e-5 per step, small against
              the initial scale 1/sqrt(d)).

        Relations:
            - With λ = 1 it equals ``MultipleNegativesRankingLoss(model, scale=1/temperature)``.
            - :class:`CachedL2DirLoss` is the GradCache variant (same gradients, bounded memory).
            - :class:`InfoTNLoss` is the magnitude term alone (collapses).

        Example:
            ::

                from datasets import Dataset
                from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
                from st_magnitude.callbacks import LossStateCallback, LossStatsCallback
                from st_magnitude.losses.l2dir import L2DirLoss

                model = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2")
                train_dataset = Dataset.from_dict({
                    "anchor": ["It's nice weather outside today.", "He drove to work."],
                    "positive": ["It's so sunny.", "He took the car to the office."],
                })
                loss = L2DirLoss(model, lambda_=0.5, temperature=0.02, tn_temperature=0.01)
                trainer = SentenceTransformerTrainer(
                    model=model,
                    train_dataset=train_dataset,
                    loss=loss,
                    callbacks=[LossStateCallback(loss), LossStatsCallback(loss)],  # NAP head checkpoints, stats
                )
                trainer.train()
        """
        super().__init__()
        if not (isinstance(lambda_, (int, float)) and 0.0 <= float(lambda_) <= 1.0):
            raise ValueError(f"lambda_ must lie in [0, 1] (the InfoNCE weight; paper: 0.5), got {lambda_!r}")
        if nap_input not in NAP_INPUTS:
            raise ValueError(f"nap_input must be one of {list(NAP_INPUTS)}, got {nap_input!r}")
        self.model = model
        self.lambda_ = float(lambda_)
        self.temperature: float | LearnableScale = parse_temperature(temperature, default=0.02)
        self.tn_temperature = _check_temperature("tn_temperature", tn_temperature)
        self.eps = float(eps)
        self.gather_across_devices = bool(gather_across_devices)
        self.tap = NAPInputTap(model, nap_input=nap_input, final_norm=final_norm)
        if nap_head is None:
            nap_head = _default_head(model, self.tap, nap_hidden_features)
        elif nap_hidden_features is not None:
            raise ValueError("nap_hidden_features only shapes the default head; do not pass it with nap_head")
        if not isinstance(nap_head, NAPHead):
            raise ValueError(f"nap_head must be a NAPHead or None, got {type(nap_head).__name__}")
        self.nap_head = nap_head
        self.callback_attached = False
        self._warned_no_callback = False
        if self.lambda_ == 0.0:
            warnings.warn(
                "L2DirLoss with lambda_=0 is InfoTN alone, which collapses in the paper's ablation (Table 2: Recall@1 "
                "3.3). Use lambda_=0.5 (the paper's value).",
                InfoTNCollapseWarning,
                stacklevel=2,
            )
        _warn_if_not_cosine_served(model)

    # --- forward ------------------------------------------------------------------------------------------
    def forward(
        self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None
    ) -> dict[str, Tensor]:
        sentence_features = [dict(f) for f in sentence_features]  # a BatchEncoding output is no dict for the tap
        self._check_columns(sentence_features)
        embeddings, states = [], []
        for features in sentence_features:
            emb, state = self.tap.embed(features, self.model)
            embeddings.append(emb)
            states.append(state)
        modalities = [modality_key(f.get("modality")) for f in sentence_features]
        sync_loss_held_gradients(self)
        return self.compute_loss_from_embeddings(embeddings, states, labels, modalities=modalities)

    def _check_columns(self, sentence_features: list) -> None:
        check_columns([feature_rows(f) for f in sentence_features], type(self).__name__)
        if self.training and torch.is_grad_enabled() and not self.callback_attached and not self._warned_no_callback:
            logger.warning(
                "%s is training a NAP head that sentence-transformers does not save: add "
                "callbacks=[LossStateCallback(loss)] (st_magnitude.callbacks) to the trainer so the head is "
                "saved with checkpoints and restored on resume.",
                type(self).__name__,
            )
            self._warned_no_callback = True

    def compute_loss_from_embeddings(
        self,
        embeddings: list[Tensor],
        nap_inputs: list[Tensor],
        labels: Tensor | None = None,
        modalities: list[str] | None = None,
    ) -> dict[str, Tensor]:
        """Eq. 8 from per-column embeddings (for InfoNCE) and NAP inputs (for InfoTN); returns both weighted parts.

        With ``gather_across_devices`` the candidate columns (and their NAP outputs) of every process are gathered
        (with gradients); each process scores its own anchors against all of them, so the mean over processes of
        the returned loss is the loss of the global batch. The NAP head's gradient is averaged over processes by
        :meth:`forward` (or by the cached loss that calls this on its cached embeddings).
        """
        name = type(self).__name__
        check_columns([e.size(0) for e in embeddings], name)
        check_columns([x.size(0) for x in nap_inputs], name)
        check_finite(list(embeddings), name)
        check_finite(list(nap_inputs), name, "NAP inputs (un-normalized states)")
        po = _project(self.nap_head, nap_inputs, modalities)
        n_docs = len(embeddings) - 1
        gathered, offset, _ = gather_columns([*embeddings[1:], *po[1:]], self.gather_across_devices, name)
        docs, po_docs = gathered[:n_docs], gathered[n_docs:]
        check_has_negatives(docs[0].size(0), n_docs, name)
        rows = torch.arange(offset, offset + embeddings[0].size(0), device=embeddings[0].device)
        nce = info_nce_loss(embeddings[0], torch.cat(docs), temperature_tensor(self.temperature), labels=rows)
        tn = info_tn_loss(po[0], torch.cat(po_docs), self.tn_temperature, self.eps, labels=rows)
        stats = _length_stats(po[0], po[1])
        with torch.no_grad():
            stats["positive_sim_tn"] = float(get_similarity("tn", eps=self.eps).pairwise(po[0], po[1]).mean())
            stats["infonce_raw"] = float(nce)
            stats["infotn_raw"] = float(tn)
        self._record_stats(stats)
        return {"infonce": self.lambda_ * nce, "infotn": (1.0 - self.lambda_) * tn}

    # --- config -------------------------------------------------------------------------------------------
    def get_config_dict(self) -> dict[str, Any]:
        return {
            "lambda_": self.lambda_,
            **temperature_config(self.temperature),
            "tn_temperature": self.tn_temperature,
            "nap_input": self.tap.nap_input,
            "final_norm": self.tap.final_norm_paths or None,
            "nap_head": self.nap_head.get_config_dict(),
            "gather_across_devices": self.gather_across_devices,
        }

    @property
    def scale(self) -> float:
        """1/τ, the InfoNCE scale in sentence-transformers terms."""
        return scale_value(self.temperature) if isinstance(self.temperature, LearnableScale) else 1 / self.temperature

    @property
    def citation(self) -> str:
        return _CITATION


class CachedL2DirLoss(CachedLoss):
    _delegated_to_wrapped_loss = (
        "lambda_",
        "temperature",
        "tn_temperature",
        "eps",
        "gather_across_devices",
        "tap",
        "nap_head",
        "callback_attached",
        "scale",
        "last_stats",
        "pop_stats",
        "stats_prefix",
    )

    def __init__(
        self,
        model: nn.Module,
        lambda_: float = 0.5,
        temperature: float | str = 0.02,
        tn_temperature: float = 0.01,
        nap_head: NAPHead | None = None,
        nap_input: str = "auto",
        final_norm: str | dict[str, str] | None = None,
        nap_hidden_features: int | None = None,
        eps: float = 1e-8,
        mini_batch_size: int = 32,
        show_progress_bar: bool = False,
        gather_across_devices: bool = False,
    ) -> None:
        """GradCache version of :class:`L2DirLoss`: large batches in bounded memory, same loss and gradients.

        Each mini-batch is embedded once without gradients; the cached quantity per input is the concatenation
        ``[embedding, NAP input]``, so step (2) computes eq. 8 over the whole batch and caches the gradient of
        *both* the normalized embedding (InfoNCE) and the NAP input (InfoTN), and step (3) back-propagates both
        into the backbone. (The authors' release builds the NAP-side surrogate but never back-propagates it;
        here the two parts provably match :class:`L2DirLoss` — see the gradient-equality test.)
        The NAP head's own gradient is computed in step (2) and handed back through the returned loss, so the
        Trainer's gradient-accumulation divisor and the fp16 loss scale reach it exactly as they reach the backbone.
        The loss over the batch is computed in one piece (``B × B`` logits), so ``mini_batch_size`` bounds the
        backbone's activations only. Like ST's cached losses it wraps an :class:`L2DirLoss` built from the same
        arguments (``self.loss``; ``lambda_``, ``nap_head``, ... read and assign through to it), whose
        ``compute_loss_from_embeddings`` computes eq. 8 on the cached embeddings.

        Args:
            model, lambda_, temperature, tn_temperature, nap_head, nap_input, final_norm, nap_hidden_features, eps,
                gather_across_devices: as in :class:`L2DirLoss`.
            mini_batch_size: inputs embedded per forward pass (memory knob; the result does not depend on it).
            show_progress_bar: show a progress bar over the mini-batches.

        References:
            - L2Dir (Zong et al., ACL 2026), eq. 8; GradCache: Scaling Deep Contrastive Learning Batch Size under
              Memory Limited Setup (Gao et al., 2021).

        Requirements:
            1. (anchor, positive) pairs or (anchor, positive, negative_1, ..., negative_n) tuples.
            2. ``LossStateCallback(loss)`` in the trainer's callbacks (NAP head checkpointing).
            3. Dropout randomness is replayed exactly (ST's ``RandContext``).

        Inputs:
            +-------------------------------------------------+--------+
            | Inputs                                          | Labels |
            +=================================================+========+
            | (anchor, positive) pairs                        | none   |
            +-------------------------------------------------+--------+
            | (anchor, positive, negative_1, ..., negative_n) | none   |
            +-------------------------------------------------+--------+

        Recommendations:
            - Use it when the batch does not fit in memory with :class:`L2DirLoss` (the paper trains its 2B
              models with GradCache at batch 1024).

        Relations:
            - Equal loss and gradients to :class:`L2DirLoss` (up to float rounding).

        Example:
            ::

                from sentence_transformers import SentenceTransformer
                from st_magnitude.callbacks import LossStateCallback
                from st_magnitude.losses.l2dir import CachedL2DirLoss

                model = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2")
                loss = CachedL2DirLoss(model, mini_batch_size=16)
                callbacks = [LossStateCallback(loss)]  # pass to SentenceTransformerTrainer(..., callbacks=callbacks)
        """
        super().__init__(
            L2DirLoss(
                model,
                lambda_=lambda_,
                temperature=temperature,
                tn_temperature=tn_temperature,
                nap_head=nap_head,
                nap_input=nap_input,
                final_norm=final_norm,
                nap_hidden_features=nap_hidden_features,
                eps=eps,
                gather_across_devices=gather_across_devices,
            ),
            mini_batch_size,
            show_progress_bar=show_progress_bar,
        )
        self._call: _CachedCall | None = None

    def embed_minibatch(self, sentence_feature, begin, end, with_grad, copy_random_state, random_state=None):
        """Embed one mini-batch; return ``[embedding, NAP input]`` concatenated, so both get a cached gradient."""
        with self.loss.tap.capturing():
            reps, random_state = super().embed_minibatch(
                sentence_feature, begin, end, with_grad, copy_random_state, random_state
            )
            _, state = self.loss.tap.collect()
        if self._call is not None:  # step (1); step (3) re-embeds during backward, after forward has returned
            self._call.embedding_width = reps.shape[-1]
        return torch.cat([reps, state.to(reps.dtype)], dim=-1), random_state

    def calculate_loss(
        self, reps: list[list[Tensor]], labels: Tensor | None = None, *, with_backward: bool = False
    ) -> Tensor:
        """Eq. 8 over the whole batch by :meth:`L2DirLoss.compute_loss_from_embeddings` on the cached ``[embedding,
        NAP input]``."""
        call = self._call
        d = call.embedding_width
        columns = [torch.cat(r) for r in reps]
        parts = self.loss.compute_loss_from_embeddings(
            [c[:, :d] for c in columns], [c[:, d:] for c in columns], labels, modalities=call.modalities
        )
        nce, tn = parts["infonce"], parts["infotn"]
        loss = nce + tn
        if with_backward:
            loss.backward()
            loss, nce, tn = loss.detach(), nce.detach(), tn.detach()
        call.parts = (nce, tn)
        return loss

    def forward(
        self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None
    ) -> dict[str, Tensor]:
        sentence_features = list(sentence_features)
        self.loss._check_columns(sentence_features)
        self._call = _CachedCall(modalities=[modality_key(f.get("modality")) for f in sentence_features])
        try:
            sync_loss_held_gradients(self)
            loss = forward_cached_scaled(self, sentence_features, labels)
            nce, tn = self._call.parts
        finally:
            self._call = None
        # Split the hooked total into its two parts for logging; their sum is `loss` and both gradients reach
        # its hook (weights w and 1 − w add up to 1).
        total = (nce + tn).detach()
        w = (nce.detach() / total) if float(total) != 0.0 else torch.tensor(0.5, device=loss.device)
        return {"infonce": loss * w, "infotn": loss * (1.0 - w)}

    def get_config_dict(self) -> dict[str, Any]:
        return {**self.loss.get_config_dict(), "mini_batch_size": self.mini_batch_size}


@dataclass
class _CachedCall:
    """What one :meth:`CachedL2DirLoss.forward` call hands from its steps to the next (dropped when it returns)."""

    modalities: list[str]
    embedding_width: int | None = None
    parts: tuple[Tensor, Tensor] | None = None


# ----------------------------------------------------------------------------------------------------------------
# exporting the NAP head (training checkpoints: st_magnitude.callbacks.LossStateCallback)
# ----------------------------------------------------------------------------------------------------------------
#: Sub-folder of a checkpoint that holds the NAP head.
NAP_HEAD_DIRNAME = "nap_head"


def _head_of(loss_or_head: Any) -> NAPHead:
    head = loss_or_head if isinstance(loss_or_head, NAPHead) else getattr(loss_or_head, "nap_head", None)
    if not isinstance(head, NAPHead):
        raise ValueError(
            f"expected an L2DirLoss/CachedL2DirLoss (or InfoTNLoss with a head) or a NAPHead, got "
            f"{type(loss_or_head).__name__} without a NAP head"
        )
    return head


def save_nap_head(loss_or_head: Any, path: str | os.PathLike) -> Path:
    """Write the NAP head of ``loss_or_head`` to the folder ``path`` (config + safetensors) and return it."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    _head_of(loss_or_head).save(str(path))
    return path


def load_nap_head(loss_or_head: Any, path: str | os.PathLike) -> NAPHead:
    """Copy the weights saved in ``path`` into the existing head of ``loss_or_head`` (in place) and return it.

    In place, so an optimizer that already holds the head's parameters keeps optimizing the same tensors. The saved
    head must have the same shape (its config is checked first).
    """
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"no saved NAP head in {path} (expected config.json and model.safetensors)")
    head = _head_of(loss_or_head)
    saved = NAPHead.load(str(path))
    if saved.get_config_dict() != head.get_config_dict():
        raise ValueError(
            f"the NAP head saved in {path} has config {saved.get_config_dict()}, but the loss's head has "
            f"{head.get_config_dict()}; build the loss with the same head shape"
        )
    with torch.no_grad():
        for name, tensor in saved.state_dict().items():
            head.state_dict()[name].copy_(tensor)
    return head
