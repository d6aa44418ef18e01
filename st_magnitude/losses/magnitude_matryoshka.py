"""Matryoshka training without re-normalisation (paper 003): every truncation keeps the embedding's magnitude."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from torch import Tensor, nn

from st_magnitude.losses._common import set_roles
from st_magnitude.losses._loss_state import sync_loss_held_gradients
from st_magnitude.losses.margin_contrastive import SCALING_CITATION

__all__ = ["MagnitudeMatryoshkaLoss"]


class MagnitudeMatryoshkaLoss(nn.Module):
    def __init__(
        self,
        model: nn.Module,
        loss: nn.Module,
        matryoshka_dims: Sequence[int],
        matryoshka_weights: Sequence[float] | None = None,
        set_roles: bool = True,
    ) -> None:
        """
        Matryoshka training that keeps magnitude: the inner loss sees the first ``d`` coordinates of each
        embedding for every ``d`` in ``matryoshka_dims``, **without** re-normalisation, and the weighted sum is
        returned. ST's ``MatryoshkaLoss`` L2-normalises every truncated embedding, which destroys the norm that
        dot / qnorm / dnorm / learnable similarities rely on. Here a model trained with a raw-dot recipe stays a
        raw-dot model at every truncation, and inference-time ``truncate_dim`` (also a plain slice) matches
        training.

        Args:
            model: the SentenceTransformer to train.
            loss: an inner loss exposing ``compute_loss_from_embeddings(embeddings, labels)`` (e.g.
                :class:`BertRecipeLoss`, :class:`EttinRecipeLoss`, ST's ``MultipleNegativesRankingLoss``).
            matryoshka_dims: truncation sizes, each in [1, full dimension].
            matryoshka_weights: one weight per dimension (default: all 1).
            set_roles: set ``features["task"]`` to query / document when absent (as :class:`MarginContrastiveLoss`).

        References:
            - Kusupati et al., Matryoshka Representation Learning, https://arxiv.org/abs/2205.13147.
            - Killingback et al., SIGIR 2026, §5 (the laws could choose the truncation size).

        Requirements:
            1. The inner loss's requirements.

        Inputs:
            +---------------------------------+---------------------------------+
            | Texts                           | Labels                          |
            +=================================+=================================+
            | as the inner loss               | as the inner loss               |
            +---------------------------------+---------------------------------+

        Recommendations:
            - Use a normalising inner loss (Ettin recipe) only if you want normalised truncations: the cosine in
              the inner loss then normalises each truncation itself.

        Relations:
            - ST's ``MatryoshkaLoss`` is this loss plus ``F.normalize`` after every truncation.

        Example:
            ::

                from sentence_transformers import SentenceTransformer
                from st_magnitude import strip_normalize
                from st_magnitude.losses import BertRecipeLoss, MagnitudeMatryoshkaLoss

                model = strip_normalize(SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2"))
                loss = MagnitudeMatryoshkaLoss(model, BertRecipeLoss(model), [384, 128, 32])
        """
        super().__init__()
        if not hasattr(loss, "compute_loss_from_embeddings"):
            raise ValueError(
                f"inner loss {type(loss).__name__} has no compute_loss_from_embeddings(embeddings, labels); use "
                "BertRecipeLoss, EttinRecipeLoss, MarginContrastiveLoss or ST's MultipleNegativesRankingLoss"
            )
        dims = list(matryoshka_dims)
        if not dims or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in dims):
            raise ValueError(f"matryoshka_dims must be a non-empty list of positive ints, got {matryoshka_dims!r}")
        weights = [1.0] * len(dims) if matryoshka_weights is None else [float(w) for w in matryoshka_weights]
        if len(weights) != len(dims) or any(not (w >= 0 and math.isfinite(w)) for w in weights):
            raise ValueError("matryoshka_weights needs one finite, non-negative weight per dimension")
        self.model = model
        self.loss = loss
        self.matryoshka_dims = dims
        self.matryoshka_weights = weights
        self.set_roles = bool(set_roles)

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None) -> dict[str, Tensor]:
        features = list(sentence_features)
        if self.set_roles:
            features = set_roles(features)
        embeddings = [self.model(f)["sentence_embedding"] for f in features]
        sync_loss_held_gradients(self)  # parameters of the inner loss (γ̂) average over processes like the model's
        return self.compute_loss_from_embeddings(embeddings, labels)

    def compute_loss_from_embeddings(self, embeddings: Sequence[Tensor], labels: Tensor | None) -> dict[str, Tensor]:
        full = embeddings[0].shape[-1]
        bad = [d for d in self.matryoshka_dims if d > full]
        if bad:
            raise ValueError(f"matryoshka_dims {bad} exceed the embedding dimension {full}")
        out: dict[str, Tensor] = {}
        for dim, weight in zip(self.matryoshka_dims, self.matryoshka_weights):
            value = self.loss.compute_loss_from_embeddings([e[..., :dim] for e in embeddings], labels)
            terms = value if isinstance(value, dict) else {"loss": value}
            for key, term in terms.items():
                out[f"{key}_{dim}"] = weight * term
        return out

    @property
    def host_reads_per_step(self) -> int:
        """The inner loss's host reads per step (``FamilyLoss.host_reads_per_step``), once per dimension."""
        return len(self.matryoshka_dims) * getattr(self.loss, "host_reads_per_step", 0)

    def get_config_dict(self) -> dict[str, Any]:
        return {
            "loss": type(self.loss).__name__,
            "matryoshka_dims": self.matryoshka_dims,
            "matryoshka_weights": self.matryoshka_weights,
        }

    @property
    def citation(self) -> str:
        return SCALING_CITATION
