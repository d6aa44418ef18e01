"""Truncate a model's embeddings before its normalisation, never after (ST's ``truncate_dim`` truncates after)."""

from __future__ import annotations

import logging

import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.base.modules import Dense
from torch import nn

from st_magnitude.model._layout import NORMALISATIONS, Layout, kind_of, read_layout, write_layout
from st_magnitude.model.card import update_model_card
from st_magnitude.model.info import training_similarity

logger = logging.getLogger(__name__)

__all__ = ["check_truncation", "truncate_model"]


def check_truncation(model: SentenceTransformer) -> None:
    """Raise when ``model.truncate_dim`` would give wrong scores for this model.

    sentence-transformers applies ``truncate_dim`` to the model's *output*, i.e. after any ``Normalize`` /
    :class:`RoleNormalize`. A normalised route then keeps its full-dimension norm (a dnorm document truncated from
    384 to 128 dims has norm < 1), so the served score is not the similarity of the truncated raw vectors. Only a
    model scored with cosine (which re-normalises) or one without any normalisation is unaffected.
    """
    if not isinstance(model, nn.Module) or getattr(model, "truncate_dim", None) is None:
        return
    if read_layout(model).has(*NORMALISATIONS) and model.similarity_fn_name != "cosine":
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


def _before_normalisation(modules: tuple[nn.Module, ...], layer: Dense, start: int = 0) -> tuple[nn.Module, ...]:
    """``modules`` with ``layer`` right before the first normalisation at or after ``start`` (at the end if none)."""
    kinds = [kind_of(m) for m in modules]
    at = next((i for i in range(start, len(modules)) if kinds[i] in NORMALISATIONS), len(modules))
    return (*modules[:at], layer, *modules[at:])


def _truncated(layout: Layout, layer: Dense) -> Layout:
    """``layout`` with ``layer`` before its normalisation: after the Router when one follows it (once), else at the
    end of every route, else before the first normalisation (at the end when there is none)."""
    if layout.router is None:
        return Layout.of(_before_normalisation(layout.modules, layer))
    if any(k in NORMALISATIONS for k in layout.kinds[1:]):  # normalisation after the Router: truncate there, once
        return Layout.of(_before_normalisation(layout.modules, layer, start=1), layout.routes)
    routes = {name: _before_normalisation(seq, layer) for name, seq in layout.routes.items()}
    return Layout.of(layout.modules, routes)


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
    target = _truncated(read_layout(model), _truncation_layer(full, dim, model))
    write_layout(model, target)
    logger.info("truncate_model: %d -> %d dims, truncated before normalisation", full, dim)
    if target.carries or training_similarity(model) is not None:
        update_model_card(model)
    return model
