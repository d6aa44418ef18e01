"""Partial-norm InfoNCE (paper 000 eq. 2 with any member of the similarity family), plain and cached (GradCache)."""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import Tensor, nn

from st_magnitude.losses._batch import GatheredBatch
from st_magnitude.losses._common import CachedLoss, FamilyLoss, at_least_fp32
from st_magnitude.similarity import Similarity

logger = logging.getLogger(__name__)

__all__ = ["PartialNormInfoNCELoss", "CachedPartialNormInfoNCELoss", "MAGNITUDE_CITATION"]

MAGNITUDE_CITATION = """
@misc{feng2025beyondunithypersphere,
    title={Beyond the Unit Hypersphere: On the Role of Embedding Magnitude in Contrastive Learning},
    author={Xincan Feng and Taro Watanabe},
    year={2025},
    note={Preprint under review}
}
"""


def infonce_rows(
    similarity: Similarity,
    queries: Tensor,
    docs_all: Tensor,
    positive_columns: Tensor,
    scale: float,
) -> Tensor:
    """Per-row InfoNCE of paper 000 eq. 2: ``-log softmax(scale · s(q_i, ·))[pos_i]`` over all candidates.

    ``queries`` [r, n] are the rows, ``docs_all`` [M, n] every candidate (positives of all queries first, then the
    hard-negative columns, as in ST's MNRL), ``positive_columns`` [r] the column of each row's positive.
    Computed in float32 (logsumexp), so fp16/bf16 autocast stays finite.
    """
    logits = at_least_fp32(similarity(queries, docs_all)) * scale  # [r, M]
    rows = torch.arange(queries.size(0), device=queries.device)
    return torch.logsumexp(logits, dim=1) - logits[rows, positive_columns]


class PartialNormInfoNCELoss(FamilyLoss):
    def __init__(
        self,
        model: nn.Module,
        similarity: str | Similarity | None = "qnorm",
        scale: float = 20.0,
        gather_across_devices: bool = False,
    ) -> None:
        """InfoNCE with in-batch negatives (paper 000 eq. 2) scored with any member of the magnitude-aware
        similarity family ``s(q, d) = φ_γq(q) · φ_γd(d)``: cosine, dot, qnorm (query-only normalisation), dnorm
        (document-only normalisation) or learnable (γ = sigmoid(γ̂), paper 000 eq. 7).

        For every anchor (query) ``q_i`` the candidates are all positives of the batch plus every hard-negative
        column of the batch, exactly as in ``MultipleNegativesRankingLoss``:
        ``L = (1/B) Σ_i [logsumexp_j(scale · s(q_i, d_j)) − scale · s(q_i, d_i⁺)]``. With ``similarity="cosine"``
        on a plain model this *is* MNRL (same scale), to float precision.

        Two ways to use it:

        - **converted model** (recommended): ``st_magnitude.apply_similarity(model, "qnorm")`` makes the model emit
          φ_γq(q) for queries and φ_γd(d) for documents and serve that similarity at inference. The loss detects
          it, scores with a plain dot product, and sets ``features["task"]`` to ``"query"`` for the first column
          and ``"document"`` for the others (unless ``router_mapping`` already did). ``similarity=None`` (or the
          carried name) is then accepted; a different name raises ``ValueError``.
        - **plain model**: the loss applies the similarity to the raw outputs ("swap the similarity"). It warns if
          the model still ends in ``Normalize`` while a magnitude-keeping similarity is asked for (then it trains
          exactly like cosine), and for ``learnable``, whose γ̂ would then live in the loss and not be saved.

        Args:
            model: a SentenceTransformer (plain, or converted by ``st_magnitude.apply_similarity``).
            similarity: ``"cosine"``, ``"dot"``, ``"qnorm"``, ``"dnorm"``, ``"learnable"``, a ``Similarity``, or
                ``None`` for "what the model carries" (a plain model: its ``similarity_fn_name``, cosine or dot).
            scale: inverse temperature (paper 000: 20, i.e. τ = 0.05).
            gather_across_devices: gather embeddings from all processes (with gradients) before the loss, like
                MNRL; each process then scores its own anchors against every candidate of every process.

        References:
            - Feng & Watanabe, "Beyond the Unit Hypersphere: On the Role of Embedding Magnitude in Contrastive
              Learning", eqs. 2–7.
            - van den Oord et al. 2018, "Representation Learning with Contrastive Predictive Coding" (InfoNCE).

        Requirements:
            1. (anchor, positive) pairs or (anchor, positive, negative_1, ..., negative_n) tuples.
            2. A batch with at least one negative: batch size ≥ 2, or hard-negative columns.

        Inputs:
            +-------------------------------------------------+--------+
            | Inputs                                          | Labels |
            +=================================================+========+
            | (anchor, positive) pairs                        | none   |
            +-------------------------------------------------+--------+
            | (anchor, positive, negative_1, ..., negative_n) | none   |
            +-------------------------------------------------+--------+

        Recommendations:
            - Convert the model with ``st_magnitude.apply_similarity`` so it serves the trained similarity.
            - Use ``batch_sampler=BatchSamplers.NO_DUPLICATES``: a duplicated positive is scored as a negative of
              the other query (as in MNRL); the loss logs a warning the first time it sees one.
            - Add ``st_magnitude.callbacks.GammaLoggingCallback()`` to log the learnable γq/γd.

        Relations:
            - With ``similarity="cosine"`` equal to ``MultipleNegativesRankingLoss(model, scale=scale)``.
            - :class:`CachedPartialNormInfoNCELoss` gives the same loss and gradients with GradCache (large batches).
            - :class:`~st_magnitude.losses.MWLoss` is the cross-query (AUC) counterpart.

        Example:
            ::

                from datasets import Dataset
                from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
                from sentence_transformers import SentenceTransformerTrainingArguments
                from st_magnitude import apply_similarity
                from st_magnitude.losses import PartialNormInfoNCELoss

                model = apply_similarity(SentenceTransformer("all-MiniLM-L6-v2"), "qnorm")
                train_dataset = Dataset.from_dict({
                    "anchor": ["what lowers blood sugar?", "is coffee bad for sleep?"],
                    "positive": ["Fiber slows sugar uptake.", "Caffeine delays sleep onset."],
                })
                args = SentenceTransformerTrainingArguments(
                    "out", router_mapping={"anchor": "query", "positive": "document"}
                )
                trainer = SentenceTransformerTrainer(
                    model=model, args=args, train_dataset=train_dataset, loss=PartialNormInfoNCELoss(model)
                )
                trainer.train()
        """
        if not (isinstance(scale, (int, float)) and scale > 0):
            raise ValueError(f"scale must be a positive number (inverse temperature), got {scale!r}")
        super().__init__(model, similarity, gather_across_devices)
        self.scale = float(scale)

    def rows_loss(self, batch: GatheredBatch, begin: int, end: int) -> Tensor:
        """InfoNCE of this process's anchors ``begin:end``, divided by the local batch size (the chunks add up to
        the mean over the batch)."""
        local = batch.local_rows(begin, end)
        per_row = infonce_rows(self.similarity_fct, batch.queries[local], batch.docs_all, local, self.scale)
        return per_row.sum() / batch.size

    @property
    def temperature(self) -> float:
        return 1.0 / self.scale

    def get_config_dict(self) -> dict[str, Any]:
        return {**self.similarity_config(), "scale": self.scale, "gather_across_devices": self.gather_across_devices}

    @property
    def citation(self) -> str:
        return MAGNITUDE_CITATION


class CachedPartialNormInfoNCELoss(CachedLoss):
    _delegated_to_wrapped_loss = (
        "scale",
        "similarity_fct",
        "carried",
        "similarity_name",
        "gather_across_devices",
        "temperature",
    )

    def __init__(
        self,
        model: nn.Module,
        similarity: str | Similarity | None = "qnorm",
        scale: float = 20.0,
        mini_batch_size: int = 32,
        mini_batch_num_tokens: int | None = None,
        gather_across_devices: bool = False,
        show_progress_bar: bool = False,
    ) -> None:
        """:class:`PartialNormInfoNCELoss` with gradient caching (GradCache, Gao et al. 2021) on ST's
        ``CachedLossMixin``: the same loss and gradients, for effective batches far beyond memory.

        Embeds the batch in mini-batches without gradients, computes the loss (chunked over ``mini_batch_size``
        anchors, backward per chunk), then re-embeds each mini-batch with gradients and back-propagates the cached
        embedding gradients. Roles (``features["task"]``) are set before embedding, so converted models work.

        Like ST's ``CachedMultipleNegativesRankingLoss``, it wraps the plain loss built from the same arguments
        (``self.loss``): ``scale``, ``similarity_fct``, ... read and assign through to it, and each chunk of the
        loss is computed by :meth:`PartialNormInfoNCELoss.rows_loss`.

        Args:
            model: a SentenceTransformer (plain, or converted by ``st_magnitude.apply_similarity``).
            similarity: as in :class:`PartialNormInfoNCELoss`.
            scale: inverse temperature (paper 000: 20).
            mini_batch_size: rows per forward pass and per loss chunk; bounds memory, not the result.
            mini_batch_num_tokens: pack mini-batches by token count instead (see ST's cached losses).
            gather_across_devices: as in :class:`PartialNormInfoNCELoss`.
            show_progress_bar: show the mini-batch progress.

        References:
            - Feng & Watanabe, "Beyond the Unit Hypersphere", eq. 2.
            - Gao et al. 2021, "Scaling Deep Contrastive Learning Batch Size under Memory Limited Setup".

        Requirements:
            1. (anchor, positive) pairs or (anchor, positive, negative_1, ..., negative_n) tuples.
            2. No model module whose output depends on the batch composition (GradCache re-embeds mini-batches).

        Inputs:
            +-------------------------------------------------+--------+
            | Inputs                                          | Labels |
            +=================================================+========+
            | (anchor, positive) pairs                        | none   |
            +-------------------------------------------------+--------+
            | (anchor, positive, negative_1, ..., negative_n) | none   |
            +-------------------------------------------------+--------+

        Recommendations:
            - Large ``per_device_train_batch_size`` with a small ``mini_batch_size``.
            - ``batch_sampler=BatchSamplers.NO_DUPLICATES``.

        Relations:
            - Equal (loss and gradients) to :class:`PartialNormInfoNCELoss`; with ``similarity="cosine"`` to ST's
              ``CachedMultipleNegativesRankingLoss``.

        Example:
            ::

                from sentence_transformers import SentenceTransformer
                from st_magnitude import apply_similarity
                from st_magnitude.losses import CachedPartialNormInfoNCELoss

                model = apply_similarity(SentenceTransformer("all-MiniLM-L6-v2"), "dnorm")
                # similarity=None: train what the model carries (dnorm); per_device_train_batch_size=4096 then fits
                loss = CachedPartialNormInfoNCELoss(model, similarity=None, mini_batch_size=32)
        """
        super().__init__(
            PartialNormInfoNCELoss(model, similarity, scale, gather_across_devices),
            mini_batch_size,
            mini_batch_num_tokens,
            show_progress_bar,
        )
