"""Loading models for evaluation, and the checks around query/document roles."""

from __future__ import annotations

import copy
import logging
import os
import warnings
from pathlib import Path

from st_magnitude.convert import apply_similarity, carried_similarity, is_asymmetric, model_gammas

logger = logging.getLogger(__name__)

__all__ = ["describe_similarity", "has_roles", "load_model", "raw_model", "require_roles"]


def load_model(model, *, device: str = "cpu", max_seq_length: int | None = None, trust_remote_code: bool = True):
    """A SentenceTransformer from a local folder (or an already loaded model), optionally capping sequence length.

    Raises ``FileNotFoundError`` for a path that does not exist (hub ids are tried only when the path does not look
    local, and fail offline with the hub's own error).
    """
    from sentence_transformers import SentenceTransformer

    if not isinstance(model, SentenceTransformer):
        path = str(model)
        if Path(path).exists():
            if not (Path(path) / "modules.json").is_file() and not (Path(path) / "config.json").is_file():
                raise FileNotFoundError(f"{path} is not a SentenceTransformer folder (no modules.json/config.json).")
        elif os.path.isabs(path) or path.startswith(".") or path.count("/") != 1:
            raise FileNotFoundError(f"model folder {path!r} does not exist.")
        try:
            model = SentenceTransformer(path, device=device, trust_remote_code=trust_remote_code)
        except OSError as exc:
            if Path(path).exists():
                raise
            raise FileNotFoundError(
                f"model {path!r} is not a local folder and could not be loaded from the Hugging Face Hub "
                f"(offline?): {exc}"
            ) from exc
    if max_seq_length is not None:
        if max_seq_length <= 0:
            raise ValueError(f"max_seq_length must be positive, got {max_seq_length}")
        model.max_seq_length = max_seq_length
    return model


def has_roles(model) -> bool:
    """True when ``encode_query`` and ``encode_document`` differ: an asymmetric structure or distinct prompts."""
    if is_asymmetric(model):
        return True
    prompts = getattr(model, "prompts", None) or {}
    return prompts.get("query", "") != prompts.get("document", "")


def require_roles(model, what: str = "this evaluation") -> None:
    """Raise a clear ``ValueError`` when ``model`` has no query/document roles."""
    if not has_roles(model):
        gammas = model_gammas(model)
        kind = {(1.0, 1.0): "cosine", (0.0, 0.0): "dot"}.get(gammas, "a symmetric similarity")
        raise ValueError(
            f"{what} needs a model with query/document roles, but this model encodes queries and documents the "
            f"same way (it serves {kind}). Convert it first, e.g. st_magnitude.apply_similarity(model, 'qnorm') "
            "(or 'dnorm' / 'learnable'), or evaluate without requiring roles."
        )


def describe_similarity(model) -> str:
    """Human-readable: what the model serves (``qnorm (carried)``, ``cosine``, ``unrecognised``)."""
    carried = carried_similarity(model)
    if carried is not None:
        return f"{carried.name} carried by the model (γq={carried.gamma_query:g}, γd={carried.gamma_document:g})"
    gammas = model_gammas(model)
    name = {(1.0, 1.0): "cosine", (0.0, 0.0): "dot"}.get(gammas, "unrecognised structure")
    return f"{name} (model.similarity_fn_name={getattr(model, 'similarity_fn_name', None)!r})"


def raw_model(model):
    """A deep copy of ``model`` with every normalisation removed (Normalize, routed Normalize, RoleNormalize).

    Its ``encode_query`` / ``encode_document`` give the *raw* embeddings q, d on which paper 000's diagnostics and
    cross-evaluation are defined (Table 25 †: raw embeddings before normalisation). The original is not touched.
    """
    clone = copy.deepcopy(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        apply_similarity(clone, "dot", warn_on_strip=False)
    return clone
