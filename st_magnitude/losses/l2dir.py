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
import os
import warnings
from pathlib import Path
from typing import Any

import torch
from sentence_transformers.base.modules import Normalize
from torch import Tensor, nn

from st_magnitude.losses._batch import check_columns, check_finite, check_has_negatives, gather_columns
from st_magnitude.losses._checks import positive_finite
from st_magnitude.losses._nap_loss import CachedNAPLoss, NAPLoss, default_nap_head, length_stats
from st_magnitude.losses._temperature import (
    LearnableScale,
    parse_temperature,
    scale_value,
    temperature_config,
    temperature_tensor,
)
from st_magnitude.losses.info_tn import InfoTNCollapseWarning, info_nce_loss, info_tn_loss
from st_magnitude.modules.nap_head import NAP_INPUTS, NAPHead
from st_magnitude.similarity import get_similarity

logger = logging.getLogger(__name__)

__all__ = ["PAPER_TEMPERATURES", "CachedL2DirLoss", "L2DirLoss", "load_nap_head", "save_nap_head"]


#: The paper's two temperature settings (App. C). They are swapped between the frameworks.
PAPER_TEMPERATURES: dict[str, dict[str, float]] = {
    "vlm": {"temperature": 0.02, "tn_temperature": 0.01},  # VLM2Vec-V2 (Qwen2-VL, GME)
    "clip": {"temperature": 0.01, "tn_temperature": 0.02},  # UniIR (CLIP-B/L)
}


def _warn_if_not_cosine_served(model: nn.Module) -> None:
    name = getattr(model, "similarity_fn_name", None)
    if name not in (None, "cosine") and not any(isinstance(m, Normalize) for m in model.modules()):
        warnings.warn(
            f"The model serves similarity {name!r} without a Normalize module, but L2Dir trains a cosine InfoNCE "
            "and retrieves with cosine (paper 002 §5.4). Set model.similarity_fn_name = 'cosine' (or keep a "
            "Normalize) so that retrieval uses what was trained.",
            UserWarning,
            stacklevel=3,
        )


class L2DirLoss(NAPLoss):
    uses_embedding = True

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
        if not (isinstance(lambda_, (int, float)) and 0.0 <= float(lambda_) <= 1.0):
            raise ValueError(f"lambda_ must lie in [0, 1] (the InfoNCE weight; paper: 0.5), got {lambda_!r}")
        if nap_input not in NAP_INPUTS:
            raise ValueError(f"nap_input must be one of {list(NAP_INPUTS)}, got {nap_input!r}")
        temperature = parse_temperature(temperature, default=0.02)
        tn_temperature = positive_finite("tn_temperature", tn_temperature, "scale = 1/tn_temperature", learnable=False)
        super().__init__(model, nap_input, final_norm, eps, gather_across_devices)
        self.lambda_ = float(lambda_)
        self.temperature: float | LearnableScale = temperature
        self.tn_temperature = tn_temperature
        if nap_head is None:
            nap_head = default_nap_head(model, self.tap, nap_hidden_features)
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

    # --- forward: FamilyLoss.forward with NAPLoss.embed ------------------------------------------------------
    def check_features(self, sentence_features, loss_name: str | None = None) -> list[dict[str, Any]]:
        """Also say once, when training, that nothing saves the NAP head unless ``LossStateCallback`` is added."""
        features = super().check_features(sentence_features, loss_name)
        if self.training and torch.is_grad_enabled() and not self.callback_attached and not self._warned_no_callback:
            logger.warning(
                "%s is training a NAP head that sentence-transformers does not save: add "
                "callbacks=[LossStateCallback(loss)] (st_magnitude.callbacks) to the trainer so the head is "
                "saved with checkpoints and restored on resume.",
                loss_name or type(self).__name__,
            )
            self._warned_no_callback = True
        return features

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
        check_finite(list(embeddings), name, owner=self)
        check_finite(list(nap_inputs), name, "NAP inputs (un-normalized states)", owner=self)
        po = self.project(nap_inputs, modalities)
        n_docs = len(embeddings) - 1
        gathered, offset, _ = gather_columns([*embeddings[1:], *po[1:]], self.gather_across_devices, name)
        docs, po_docs = gathered[:n_docs], gathered[n_docs:]
        check_has_negatives(docs[0].size(0), n_docs, name)
        rows = torch.arange(offset, offset + embeddings[0].size(0), device=embeddings[0].device)
        nce = info_nce_loss(embeddings[0], torch.cat(docs), temperature_tensor(self.temperature), labels=rows)
        tn = info_tn_loss(po[0], torch.cat(po_docs), self.tn_temperature, self.eps, labels=rows)
        stats = length_stats(po[0], po[1])
        with torch.no_grad():  # kept on the device; read when logged (pop_stats)
            stats["positive_sim_tn"] = get_similarity("tn", eps=self.eps).pairwise(po[0], po[1]).mean()
            stats["infonce_raw"] = nce.detach()
            stats["infotn_raw"] = tn.detach()
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


class CachedL2DirLoss(CachedNAPLoss):
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
        mini_batch_num_tokens: int | None = None,
        gather_across_devices: bool = False,
        show_progress_bar: bool = False,
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
            mini_batch_num_tokens: pack mini-batches by token count instead (see ST's cached losses).
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
                from st_magnitude.losses import CachedL2DirLoss

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
            mini_batch_num_tokens,
            show_progress_bar,
        )


# ----------------------------------------------------------------------------------------------------------------
# exporting the NAP head (training checkpoints: st_magnitude.callbacks.LossStateCallback)
# ----------------------------------------------------------------------------------------------------------------
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
