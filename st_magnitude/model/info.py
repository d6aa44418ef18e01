"""What a model serves: its (γq, γd), its similarity, whether roles matter, and what a recipe trained it with."""

from __future__ import annotations

import logging
import warnings
from typing import Any

from sentence_transformers import SentenceTransformer
from sentence_transformers.base.modules import Normalize, Router
from torch import nn

from st_magnitude._warnings import AsymmetricSimilarityWarning
from st_magnitude.modules.role_normalize import RoleNormalize
from st_magnitude.similarity import (
    PowerNormSimilarity,
    Similarity,
)

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


_ROUTE_QUERY, _ROUTE_DOCUMENT = "query", "document"


def _is_normalize(m: nn.Module) -> bool:
    return isinstance(m, Normalize)


def _route_lists(router: Router) -> dict[str, list[nn.Module]]:
    return {name: list(seq) for name, seq in router.sub_modules.items()}


def _query_document_router_gammas(router: Router) -> tuple[float, float] | None:
    """(γq, γd) of a query/document Router whose routes share the same backbone and differ only by ``Normalize``."""
    routes = _route_lists(router)
    if set(routes) != {_ROUTE_QUERY, _ROUTE_DOCUMENT}:
        return None
    q_core = [m for m in routes[_ROUTE_QUERY] if not _is_normalize(m)]
    d_core = [m for m in routes[_ROUTE_DOCUMENT] if not _is_normalize(m)]
    if [id(m) for m in q_core] != [id(m) for m in d_core]:
        return None
    gq = 1.0 if routes[_ROUTE_QUERY] and _is_normalize(routes[_ROUTE_QUERY][-1]) else 0.0
    gd = 1.0 if routes[_ROUTE_DOCUMENT] and _is_normalize(routes[_ROUTE_DOCUMENT][-1]) else 0.0
    return gq, gd


def model_gammas(model: SentenceTransformer) -> tuple[float, float] | None:
    """The (γq, γd) a model applies at inference, or ``None`` when its structure is not one we recognise.

    Recognised: a trailing ``Normalize`` (cosine, (1, 1)), no normalisation at all (dot, (0, 0)), a query/document
    ``Router`` sharing its backbone with ``Normalize`` on one or both routes, and a trailing :class:`RoleNormalize`.
    """
    modules = list(model)
    if modules and isinstance(modules[0], Router):
        gammas = _query_document_router_gammas(modules[0])
        if gammas is None:
            return None
        rest = modules[1:]
        if any(_is_normalize(m) for m in rest):
            return (1.0, 1.0)
        role = [m for m in rest if isinstance(m, RoleNormalize)]
        return (role[-1].gamma_query, role[-1].gamma_document) if role else gammas
    role = [m for m in modules if isinstance(m, RoleNormalize)]
    if role:
        return role[-1].gamma_query, role[-1].gamma_document
    if modules and _is_normalize(modules[-1]):
        return (1.0, 1.0)
    if any(_is_normalize(m) for m in modules):
        return None  # Normalize in the middle, e.g. followed by a Dense: not a family member
    return (0.0, 0.0)


def model_similarity(model: SentenceTransformer) -> Similarity | None:
    """The family member the model serves on *raw* embeddings (learnable: shares the model's γ̂), or ``None``."""
    for m in model:
        if isinstance(m, RoleNormalize):
            return m.similarity()
    gammas = model_gammas(model)
    if gammas is None:
        return None
    return PowerNormSimilarity(*gammas)


def carried_similarity(model: SentenceTransformer) -> Similarity | None:
    """The similarity a model *converted by* :func:`apply_similarity` carries, else ``None``.

    Converted means the model itself applies a role-specific rescaling: a query/document ``Router`` that shares its
    backbone, or a :class:`RoleNormalize`. Its outputs are then already φ_γq(q) / φ_γd(d), so a loss must score them
    with a plain dot product (and give each column its role through ``features["task"]``). A plain model (with or
    without a trailing ``Normalize``) returns ``None``: a loss then applies its own similarity to the outputs.
    """
    modules = list(model)
    if any(isinstance(m, RoleNormalize) for m in modules):
        return model_similarity(model)
    if modules and isinstance(modules[0], Router) and _query_document_router_gammas(modules[0]) is not None:
        return model_similarity(model)
    return None


def is_asymmetric(model_or_similarity: SentenceTransformer | Similarity) -> bool:
    """True when query and document roles must differ (qnorm, dnorm, learnable with γq ≠ γd; paper 000 Prop. 2.1)."""
    if isinstance(model_or_similarity, Similarity):
        return not model_or_similarity.symmetric
    gammas = model_gammas(model_or_similarity)
    if gammas is not None:
        return gammas[0] != gammas[1]
    first = next(iter(model_or_similarity), None)
    return isinstance(first, Router)  # an unrecognised Router is a two-tower model: roles matter


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
