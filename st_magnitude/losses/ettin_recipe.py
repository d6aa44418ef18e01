"""Paper 003's Ettin recipe (Killingback et al.): in-batch cross-entropy on cosine with τ = 0.02 (eq. 4)."""

from __future__ import annotations

from typing import Any

from torch import nn

from st_magnitude.losses._checks import positive_finite
from st_magnitude.losses.margin_contrastive import MarginContrastiveLoss
from st_magnitude.model.convert import set_training_similarity

__all__ = ["EttinRecipeLoss"]


class EttinRecipeLoss(MarginContrastiveLoss):
    def __init__(self, model: nn.Module, temperature: float = 0.02) -> None:
        """
        Paper 003's Ettin recipe: cross-entropy only, on normalised embeddings (cosine) with τ = 0.02 (scale 50),
        negatives = every in-batch passage except the own positive (eq. 4).

        Args:
            model: the SentenceTransformer to train.
            temperature: τ; logits are cos/τ (paper: 0.02). ST's MultipleNegativesRankingLoss default is 0.05.

        References:
            - Killingback et al., SIGIR 2026, eq. 4 and §3.3.

        Requirements:
            1. (query, positive, negative_1, ..., negative_k) rows (paper: k = 7), or (query, positive) pairs.

        Inputs:
            +------------------------------------------------+--------+
            | Texts                                          | Labels |
            +================================================+========+
            | (query, positive, negative_1, ..., negative_k) | none   |
            +------------------------------------------------+--------+

        Recommendations:
            - Large batches; ``BatchSamplers.NO_DUPLICATES``.

        Relations:
            - Equals ST's ``MultipleNegativesRankingLoss(model, scale=1/τ, similarity_fct=cos_sim)``.

        Example:
            ::

                from sentence_transformers import SentenceTransformer
                from st_magnitude.losses.ettin_recipe import EttinRecipeLoss

                model = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2")
                loss = EttinRecipeLoss(model, temperature=0.02)
        """
        positive_finite("temperature", temperature, "logits are cosine / temperature", learnable=False)
        super().__init__(
            model,
            similarity="cosine",
            scale=1.0 / float(temperature),
            in_batch_negatives="all",
            margin_mse_weight=0.0,
            contrastive_weight=1.0,
        )
        self.temperature = float(temperature)
        set_training_similarity(model, "cosine", self.temperature, recipe="paper 003 Ettin")  # served: cosine, τ

    def get_config_dict(self) -> dict[str, Any]:
        config = super().get_config_dict()
        config["temperature"] = self.temperature
        return config
