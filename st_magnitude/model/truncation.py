"""Truncate a model's embeddings before its normalisation, never after (ST's ``truncate_dim`` truncates after)."""

from __future__ import annotations

import logging

import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.base.modules import Dense, Normalize, Router
from torch import nn

from st_magnitude.model.card import update_model_card
from st_magnitude.model.info import _is_normalize, carried_similarity, training_similarity
from st_magnitude.modules._surgery import replace_modules
from st_magnitude.modules.role_normalize import RoleNormalize

logger = logging.getLogger(__name__)

__all__ = ["check_truncation", "truncate_model"]


def _has_normalisation(model: nn.Module) -> bool:
    return any(isinstance(m, (Normalize, RoleNormalize)) for m in model.modules())


def check_truncation(model: SentenceTransformer) -> None:
    """Raise when ``model.truncate_dim`` would give wrong scores for this model.

    sentence-transformers applies ``truncate_dim`` to the model's *output*, i.e. after any ``Normalize`` /
    :class:`RoleNormalize`. A normalised route then keeps its full-dimension norm (a dnorm document truncated from
    384 to 128 dims has norm < 1), so the served score is not the similarity of the truncated raw vectors. Only a
    model scored with cosine (which re-normalises) or one without any normalisation is unaffected.
    """
    if not isinstance(model, nn.Module) or getattr(model, "truncate_dim", None) is None:
        return
    if _has_normalisation(model) and model.similarity_fn_name != "cosine":
        raise ValueError(
            f"truncate_dim={model.truncate_dim} on a model that normalises inside (similarity_fn_name="
            f"{model.similarity_fn_name!r}): sentence-transformers truncates after the normalisation, so the scores "
            "would be wrong. Set model.truncate_dim = None and call "
            f"st_magnitude.truncate_model(model, {model.truncate_dim}) instead (it truncates before the "
            "normalisation)."
        )


def _truncation_layer(in_features: int, dim: int, like: nn.Module | None) -> Dense:
    layer = Dense(
        in_features,
        dim,
        bias=False,
        activation_function=None,
        init_weight=torch.eye(dim, in_features),  # keeps the first `dim` coordinates exactly
    )
    param = next(like.parameters(), None) if like is not None else None
    if param is not None:
        layer.to(device=param.device, dtype=param.dtype)
    return layer


def truncate_model(model: SentenceTransformer, dim: int) -> SentenceTransformer:
    """Make ``model`` (in place) emit its first ``dim`` coordinates, truncated *before* any normalisation.

    A fixed ``Dense(n, dim)`` holding the first ``dim`` rows of the identity (no bias, no activation) goes right
    before the first ``Normalize`` / :class:`RoleNormalize` of every route (at the end when there is none), so
    ``model.similarity(model.encode_query(q), model.encode_document(d))`` equals the model's similarity applied to
    the *truncated raw* embeddings. The layer is ST's built-in ``Dense``: a saved model still loads in stock
    sentence-transformers. Use it instead of ``truncate_dim`` on every model st-magnitude produces (see
    :func:`check_truncation`); ``model.truncate_dim`` is reset to ``None``.
    """
    if not isinstance(model, SentenceTransformer):
        raise TypeError(f"truncate_model expects a SentenceTransformer, got {type(model).__name__}")
    model.truncate_dim = None  # the truncation moves into the model
    full = int(model.get_embedding_dimension())
    if isinstance(dim, bool) or not isinstance(dim, int) or not (1 <= dim <= full):
        raise ValueError(f"dim must be an int in [1, {full}], got {dim!r}")
    if dim == full:
        return model
    modules = list(model)
    layer = _truncation_layer(full, dim, model)
    if modules and isinstance(modules[0], Router):
        router = modules[0]
        if any(_is_normalize(m) or isinstance(m, RoleNormalize) for m in modules[1:]):
            # normalisation after the Router: truncate there, once
            at = next(i for i, m in enumerate(modules) if i > 0 and (_is_normalize(m) or isinstance(m, RoleNormalize)))
            replace_modules(model, modules[:at] + [layer] + modules[at:])
        else:
            for name, seq in list(router.sub_modules.items()):
                route = list(seq)
                at = next((i for i, m in enumerate(route) if _is_normalize(m) or isinstance(m, RoleNormalize)), None)
                route = route + [layer] if at is None else route[:at] + [layer] + route[at:]
                router.sub_modules[name] = nn.Sequential(*route)
            replace_modules(model, modules)
    else:
        at = next((i for i, m in enumerate(modules) if _is_normalize(m) or isinstance(m, RoleNormalize)), None)
        new = modules + [layer] if at is None else modules[:at] + [layer] + modules[at:]
        replace_modules(model, new)
    logger.info("truncate_model: %d -> %d dims, truncated before normalisation", full, dim)
    if carried_similarity(model) is not None or training_similarity(model) is not None:
        update_model_card(model)
    return model
