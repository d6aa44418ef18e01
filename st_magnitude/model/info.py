"""What a model serves: its (γq, γd), its similarity, whether roles matter, and what a recipe trained it with."""

from __future__ import annotations

import logging
import warnings
from typing import Any

from sentence_transformers import SentenceTransformer

from st_magnitude._warnings import AsymmetricSimilarityWarning
from st_magnitude.model._layout import read_layout
from st_magnitude.similarity import Similarity

logger = logging.getLogger(__name__)

__all__ = [
    "TRAINING_SIMILARITY_ATTR",
    "model_gammas",
    "model_similarity",
    "carried_similarity",
    "is_asymmetric",
    "check_symmetric_use",
    "training_similarity",
    "training_temperature",
]


def model_gammas(model: SentenceTransformer) -> tuple[float, float] | None:
    """The (γq, γd) a model applies at inference, or ``None`` when its structure is not one we recognise.

    Recognised: a trailing ``Normalize`` (cosine, (1, 1)), no normalisation at all (dot, (0, 0)), a query/document
    ``Router`` sharing its backbone with ``Normalize`` on one or both routes, and a trailing :class:`RoleNormalize`.
    """
    return read_layout(model).gammas


def model_similarity(model: SentenceTransformer) -> Similarity | None:
    """The family member the model serves on *raw* embeddings (learnable: shares the model's γ̂), or ``None``."""
    return read_layout(model).similarity()


def carried_similarity(model: SentenceTransformer) -> Similarity | None:
    """The similarity a model *converted by* :func:`apply_similarity` carries, else ``None``.

    Converted means the model itself applies a role-specific rescaling: a query/document ``Router`` that shares its
    backbone, or a :class:`RoleNormalize`. Its outputs are then already φ_γq(q) / φ_γd(d), so a loss must score them
    with a plain dot product (and give each column its role through ``features["task"]``). A plain model (with or
    without a trailing ``Normalize``) returns ``None``: a loss then applies its own similarity to the outputs.
    """
    layout = read_layout(model)
    return layout.similarity() if layout.carries else None


def is_asymmetric(model_or_similarity: SentenceTransformer | Similarity) -> bool:
    """True when query and document roles must differ (qnorm, dnorm, learnable with γq ≠ γd; paper 000 Prop. 2.1)."""
    if isinstance(model_or_similarity, Similarity):
        return not model_or_similarity.symmetric
    return read_layout(model_or_similarity).asymmetric


def check_symmetric_use(
    model_or_similarity: SentenceTransformer | Similarity, context: str = "a symmetric task", strict: bool = False
) -> bool:
    """Warn (or raise with ``strict=True``) when an asymmetric similarity is used where roles are interchangeable.

    Symmetric tasks — STS, paraphrase mining, clustering, ``model.similarity(a, b)`` on two lists encoded with the
    same role — need s(a, b) = s(b, a). Only cosine and dot (and learnable with γq = γd) give that (paper 000 Prop.
    2.1; Table 5 shows a 37–44 point Spearman loss for QNorm/DNorm-style variants on STS-B). Returns True when the
    use is fine.
    """
    if not is_asymmetric(model_or_similarity):
        return True
    msg = (
        f"Asymmetric similarity used for {context}: qnorm, dnorm and learnable (γq ≠ γd) are only valid when inputs "
        "have distinct query/document roles (paper 000, Prop. 2.1 'Task Symmetry Principle'). Use 'cosine' or 'dot' "
        "for STS, paraphrase or clustering, or encode with encode_query/encode_document for retrieval."
    )
    if strict:
        raise ValueError(msg)
    warnings.warn(msg, AsymmetricSimilarityWarning, stacklevel=2)
    return False


# ----------------------------------------------------------------------------------------------------------------
# what a recipe trained: the served similarity and the temperature (read by ContrastiveEntropyEvaluator)
# ----------------------------------------------------------------------------------------------------------------
#: Attribute a training recipe sets on the model: ``{"similarity": name, "temperature": τ, "recipe": str | None}``.
#: It lives in memory only (sentence-transformers saves no custom config keys); the model card records it in text.
TRAINING_SIMILARITY_ATTR = "st_magnitude_training"


def training_similarity(model: Any) -> dict[str, Any] | None:
    """What :func:`set_training_similarity` recorded on ``model`` (a copy), or ``None``."""
    info = getattr(model, TRAINING_SIMILARITY_ATTR, None)
    return dict(info) if isinstance(info, dict) else None


def training_temperature(model: Any) -> float | None:
    """The temperature τ the model was trained at (recorded by a recipe loss), or ``None`` when unknown."""
    info = training_similarity(model)
    return None if info is None else float(info["temperature"])
