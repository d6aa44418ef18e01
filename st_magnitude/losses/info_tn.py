"""InfoNCE and InfoTN (paper 002 eqs. 4–7): the functional losses, and InfoTNLoss with its cached twin."""

from __future__ import annotations

import logging
import warnings
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from st_magnitude.losses._batch import check_columns, check_finite, check_has_negatives
from st_magnitude.losses._checks import positive_finite
from st_magnitude.losses._nap_loss import CachedNAPLoss, NAPLoss, default_nap_head, length_stats
from st_magnitude.modules.nap_head import NAPHead
from st_magnitude.similarity import get_similarity

logger = logging.getLogger(__name__)

__all__ = ["CachedInfoTNLoss", "InfoTNCollapseWarning", "InfoTNLoss", "info_nce_loss", "info_tn_loss"]


class InfoTNCollapseWarning(UserWarning):
    """InfoTN without a directional InfoNCE term collapses (paper 002 Table 2: Recall@1 3.3 vs 63.7)."""


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


class InfoTNLoss(NAPLoss):
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
        temperature = positive_finite("temperature", temperature, "scale = 1/temperature", learnable=False)
        super().__init__(model, nap_input, final_norm, eps)
        self.temperature = temperature
        if nap_head is True:
            nap_head = default_nap_head(model, self.tap)
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

    def compute_loss_from_embeddings(
        self, embeddings: list[Tensor], labels: Tensor | None = None, modalities: list[str] | None = None
    ) -> Tensor:
        """InfoTN on per-column un-normalized states ``embeddings`` (NAP applied first when a head is set)."""
        name = type(self).__name__
        check_columns([e.size(0) for e in embeddings], name)
        check_finite(list(embeddings), name, "un-normalized states", owner=self)
        check_has_negatives(embeddings[0].size(0), len(embeddings) - 1, name)
        vectors = self.project(embeddings, modalities)
        self._record_stats(length_stats(vectors[0], vectors[1]))
        return info_tn_loss(vectors[0], torch.cat(vectors[1:]), self.temperature, self.eps)

    def get_config_dict(self) -> dict[str, Any]:
        return {
            "temperature": self.temperature,
            "nap_input": self.tap.nap_input,
            "nap_head": None if self.nap_head is None else self.nap_head.get_config_dict(),
        }


class CachedInfoTNLoss(CachedNAPLoss):
    _delegated_to_wrapped_loss = ("temperature", "eps", "tap", "nap_head", "last_stats", "pop_stats", "stats_prefix")

    def __init__(
        self,
        model: nn.Module,
        temperature: float = 0.01,
        nap_head: NAPHead | bool | None = None,
        nap_input: str = "auto",
        final_norm: str | dict[str, str] | None = None,
        eps: float = 1e-8,
        warn_collapse: bool = True,
        mini_batch_size: int = 32,
        mini_batch_num_tokens: int | None = None,
        show_progress_bar: bool = False,
    ) -> None:
        """GradCache version of :class:`InfoTNLoss`: large batches in bounded memory, same loss and gradients.

        Each mini-batch is embedded once without gradients and its un-normalized state (``nap_input``) is cached;
        step (2) computes InfoTN over the whole batch and caches the gradient of every state, step (3)
        back-propagates it into the backbone. A NAP head's own gradient is computed in step (2) and handed back
        through the returned loss, so the Trainer's gradient-accumulation divisor and the fp16 loss scale reach it
        as they reach the backbone. The loss is computed in one piece (``B × B`` logits): ``mini_batch_size`` bounds
        the backbone's activations only. Like ST's cached losses it wraps an :class:`InfoTNLoss` built from the same
        arguments (``self.loss``; ``temperature``, ``nap_head``, ... read and assign through to it).

        **Used alone, InfoTN collapses** (paper 002 Table 2), cached or not; see :class:`InfoTNLoss`.

        Args:
            model, temperature, nap_head, nap_input, final_norm, eps, warn_collapse: as in :class:`InfoTNLoss`.
            mini_batch_size: inputs embedded per forward pass (memory knob; the result does not depend on it).
            mini_batch_num_tokens: pack mini-batches by token count instead (see ST's cached losses).
            show_progress_bar: show a progress bar over the mini-batches.

        References:
            - L2Dir (Zong et al., ACL 2026), eq. 7; GradCache: Scaling Deep Contrastive Learning Batch Size under
              Memory Limited Setup (Gao et al., 2021).

        Requirements:
            1. (anchor, positive) pairs or (anchor, positive, negative_1, ..., negative_n) tuples.
            2. Dropout randomness is replayed exactly (ST's ``RandContext``).

        Inputs:
            +-------------------------------------------------+--------+
            | Inputs                                          | Labels |
            +=================================================+========+
            | (anchor, positive) pairs                        | none   |
            +-------------------------------------------------+--------+
            | (anchor, positive, negative_1, ..., negative_n) | none   |
            +-------------------------------------------------+--------+

        Recommendations:
            - Do not train with this loss alone; use :class:`~st_magnitude.losses.CachedL2DirLoss`.

        Relations:
            - Equal loss and gradients to :class:`InfoTNLoss` (up to float rounding).

        Example:
            ::

                import warnings
                from sentence_transformers import SentenceTransformer
                from st_magnitude.losses import CachedInfoTNLoss
                from st_magnitude.losses.info_tn import InfoTNCollapseWarning

                model = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2")
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", InfoTNCollapseWarning)  # an ablation, on purpose
                    loss = CachedInfoTNLoss(model, temperature=0.01, mini_batch_size=16)
        """
        super().__init__(
            InfoTNLoss(
                model,
                temperature=temperature,
                nap_head=nap_head,
                nap_input=nap_input,
                final_norm=final_norm,
                eps=eps,
                warn_collapse=warn_collapse,
            ),
            mini_batch_size,
            mini_batch_num_tokens,
            show_progress_bar,
        )
