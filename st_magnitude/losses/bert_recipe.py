"""Paper 003's BERT recipe (Killingback et al.): Margin-MSE + in-batch cross-entropy on raw dot products (eqs. 1–3)."""

from __future__ import annotations

from torch import nn

from st_magnitude.losses.margin_contrastive import MarginContrastiveLoss
from st_magnitude.model.convert import set_training_similarity

__all__ = ["BertRecipeLoss"]


class BertRecipeLoss(MarginContrastiveLoss):
    def __init__(self, model: nn.Module, margin_mse_weight: float = 1.0, contrastive_weight: float = 1.0) -> None:
        """
        Paper 003's BERT recipe: Margin-MSE against teacher margins + in-batch cross-entropy whose negatives are
        only the other queries' positives, weighted 1:1, raw dot product, no temperature (eqs. 1–3).

        Args:
            model: the SentenceTransformer to train (no ``Normalize``: the recipe uses raw dot products).
            margin_mse_weight: weight of Margin-MSE (paper: 1.0).
            contrastive_weight: weight of the in-batch cross-entropy (paper: 1.0).

        References:
            - Killingback et al., SIGIR 2026, eqs. 1–3 and §3.3 (7 hard negatives, teacher
              ``cross-encoder/ms-marco-MiniLM-L-12-v2``).

        Requirements:
            1. (query, positive, negative_1, ..., negative_k) rows (paper: k = 7).
            2. Teacher scores as labels, e.g. ``teacher_scores(CrossEncoder(...), ...)``; any scorer works.

        Inputs:
            +------------------------------------------------+--------------------------------------------------------+
            | Texts                                          | Labels                                                 |
            +================================================+========================================================+
            | (query, positive, negative_1, ..., negative_k) | [t(q, pos), t(q, neg_1), ..., t(q, neg_k)] or margins  |
            +------------------------------------------------+--------------------------------------------------------+

        Recommendations:
            - Put a :class:`~st_magnitude.modules.dimension_projection.DimensionProjection` after pooling to set
              the output dimension (``add_dimension_projection(model, m)``).

        Relations:
            - :class:`MarginContrastiveLoss` with ``similarity="dot", scale=1, in_batch_negatives="positives"``.

        Example:
            ::

                from sentence_transformers import SentenceTransformer
                from st_magnitude import strip_normalize
                from st_magnitude.losses.bert_recipe import BertRecipeLoss
                from st_magnitude.modules.dimension_projection import add_dimension_projection

                model = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2")
                strip_normalize(model)  # Transformer + Pooling, similarity "dot": the raw-dot recipe
                add_dimension_projection(model, 1536)
                loss = BertRecipeLoss(model)
        """
        super().__init__(
            model,
            similarity="dot",
            scale=1.0,
            in_batch_negatives="positives",
            margin_mse_weight=margin_mse_weight,
            contrastive_weight=contrastive_weight,
        )
        # the model now serves what it is trained with (raw dot, τ = 1), so model.similarity and the evaluators agree
        set_training_similarity(model, "dot", 1.0, recipe="paper 003 BERT")
