"""Vector-store-aware export: a converted model whose vectors rank as trained under a store's metric.

For a fixed query every member of the family ranks documents by ``φ_γq(q) · φ_γd(d)`` (paper 000 eqs. 3–7); the
query's factor ``‖q‖^-γq`` is a per-query constant, so **the top-k depends only on the document transform**:

- γd = 1 (dnorm, cosine): every document has norm 1, so a cosine store (``q·d / ‖q‖``) and an L2 store
  (``‖q‖² + 1 − 2 q·d``) rank exactly like the inner product. Nothing is added.
- γd < 1 (dot, qnorm, learnable): documents keep (part of) their magnitude, which a cosine store divides out and an
  L2 store penalises. :func:`prepare_for_store` appends the inner-product → nearest-neighbour coordinate
  (:class:`~st_magnitude.modules.MIPSAugment`, Bachrach et al. 2014, Sec. 4) so both rank like the inner product.

Scores change by per-query constants (cosine: ``1 / (‖q‖ M)``; L2: ``‖q‖² + M² − 2·score``): ranks, top-k and any
per-query metric (nDCG, MRR, recall) are those of the trained similarity; scores compared *across* queries (one
global threshold, pooled AUC) are not.

The extra coordinate needs the role: a query gets 0, a document ``sqrt(M² − ‖φ_γd(d)‖²)``. A stack that encodes
queries and documents alike (plain ``encode()``) cannot rank as trained with such an export, so the augmented model
refuses a role-less input and :func:`set_default_route` refuses to give it one; role-less stacks rank exactly with an
inner-product store (``store="dot"``), or with a dnorm / cosine model under any metric.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence

import torch
from sentence_transformers import SentenceTransformer

from st_magnitude._warnings import NormBoundWarning
from st_magnitude.model._layout import Layout, read_layout, write_layout
from st_magnitude.model.convert import _check_convertible, _converted, _serve
from st_magnitude.modules._store_limits import MAX_MARGIN, margin_problem, max_norm_problem
from st_magnitude.modules.mips_augment import MIPSAugment
from st_magnitude.similarity import DEFAULT_EPS, gammas_of, validate_similarity_name

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_ROUTES",
    "STORES",
    "convert_for_store",
    "document_norm_bound",
    "prepare_for_store",
    "preserved_metrics",
    "set_default_route",
]

#: the metrics a vector store scores with: inner product, cosine, (squared) Euclidean distance
STORES = ("dot", "cosine", "l2")
#: the only default route that keeps the top-k exact for role-unaware callers (the query factor is per query), with an
#: inner-product store or a model whose documents are unit vectors (γd = 1); never with the cosine / L2 augmentation
DEFAULT_ROUTES = ("document",)
#: the default safety margin on the largest sampled document norm
DEFAULT_MARGIN = 1.05


#: why a role-less route is refused for a cosine / L2 export of a variant with γd < 1, and what works instead
ROLELESS_STORE_REFUSAL = (
    "a default route (--default-route document) cannot keep the ranking of a cosine / L2 export of a variant whose "
    "documents keep magnitude (dot, qnorm, learnable): that export appends a coordinate only documents get, and a "
    "role-less query would get it too, so the store would rank wrongly. What works: --store dot "
    "(an inner-product store) with --default-route document; dnorm or cosine with any store and --default-route; "
    "or --store cosine / l2 without --default-route, with a stack that encodes queries with encode_query and "
    "documents with encode_document."
)


def _check_store(store: str) -> str:
    if store not in STORES:
        raise ValueError(f"store must be one of {STORES}, got {store!r}")
    return store


def preserved_metrics(model: SentenceTransformer) -> tuple[str, ...]:
    """The store metrics (of :data:`STORES`) under which ``model``'s vectors rank documents as the model scores them.

    A model with :class:`MIPSAugment` ranks exactly under all three (documents within its bound M). Otherwise: a
    model scored with ``dot`` whose documents are unit-norm (γd = 1) under all three, with γd < 1 only under ``dot``;
    a model scored with ``cosine`` under ``cosine``, and under all three when it L2-normalises its output.
    """
    return _preserved(read_layout(model), getattr(model, "similarity_fn_name", None))


def _preserved(layout: Layout, similarity_fn_name: str | None) -> tuple[str, ...]:
    if "mips_augment" in layout.kinds:
        return STORES
    fn = similarity_fn_name or "cosine"
    gammas = layout.gammas
    if fn == "dot":
        return STORES if gammas is not None and gammas[1] == 1.0 else ("dot",)
    if fn == "cosine":
        return STORES if gammas == (1.0, 1.0) else ("cosine",)
    if fn == "euclidean":
        return ("l2",)
    return ()


def _check_margin(margin: float) -> None:
    problem = margin_problem(margin)
    if problem:
        raise ValueError(f"margin={margin!r}: {problem}")


def _check_max_norm(max_norm: float | None) -> None:
    problem = None if max_norm is None else max_norm_problem(max_norm)
    if problem:
        raise ValueError(f"max_norm={max_norm!r}: {problem}")


def document_norm_bound(
    model: SentenceTransformer,
    documents: Sequence[str],
    margin: float = DEFAULT_MARGIN,
    batch_size: int = 32,
) -> float:
    """M = ``margin`` × the largest norm of ``encode_document(documents)`` (the model as it is, without augmentation).

    Pass a sample of the corpus the model will index (or of its training documents); documents later indexed with a
    larger norm are ranked lower than trained under cosine / L2, and counted with a :class:`NormBoundWarning`.
    """
    _check_margin(margin)
    if len(documents) == 0:
        raise ValueError("document_norm_bound needs at least one document to measure norms on")
    if "mips_augment" in read_layout(model).kinds:
        raise ValueError("the model already carries MIPSAugment: measure norms on the model before augmentation")
    return float(_document_norms(model, documents, batch_size).max()) * float(margin)


def _document_norms(model: SentenceTransformer, documents: Sequence[str], batch_size: int) -> torch.Tensor:
    with torch.no_grad():
        emb = model.encode_document(list(documents), batch_size=batch_size, convert_to_tensor=True)
    norms = emb.double().norm(dim=-1)
    if not torch.isfinite(norms).all():
        raise ValueError("document embeddings contain NaN/inf: cannot bound their norms (a diverged model?)")
    return norms


def prepare_for_store(
    model: SentenceTransformer,
    store: str,
    *,
    max_norm: float | None = None,
    documents: Sequence[str] | None = None,
    margin: float = DEFAULT_MARGIN,
    batch_size: int = 32,
) -> SentenceTransformer:
    """Make ``model`` (in place) rank as trained under ``store``'s metric; returns the model.

    ``store="dot"``, or a model that already ranks exactly under ``store`` (γd = 1: dnorm, cosine), is left as it
    is. Otherwise a :class:`~st_magnitude.modules.MIPSAugment` with bound M is appended after the role transform; M
    is ``max_norm`` if given, else :func:`document_norm_bound` of ``documents`` (× ``margin``). With both, the
    documents are checked against ``max_norm`` and a :class:`NormBoundWarning` names how many exceed it. An
    augmentation already present is replaced.
    """
    _check_store(store)
    _check_margin(margin)
    _check_max_norm(max_norm)
    layout = read_layout(model)
    target = _for_store(
        model,
        layout.without("mips_augment"),
        model.similarity_fn_name,
        store,
        max_norm=max_norm,
        documents=documents,
        margin=margin,
        batch_size=batch_size,
        truncate_dim=model.truncate_dim,
    )
    if target.modules != layout.modules:
        write_layout(model, target)
    return model


def _for_store(
    model: SentenceTransformer,
    layout: Layout,
    similarity_fn_name: str | None,
    store: str,
    *,
    max_norm: float | None,
    documents: Sequence[str] | None,
    margin: float,
    batch_size: int,
    truncate_dim: int | None = None,
) -> Layout:
    """The layout that ranks as trained under ``store``: ``layout`` (without augmentation), or it with a
    :class:`MIPSAugment` appended. Measuring ``documents`` encodes them through ``layout``, so the model is made to
    hold it first."""
    gammas = layout.gammas
    if gammas is None:
        raise ValueError(
            "prepare_for_store needs a model whose query/document transform it recognises (a model converted with "
            "st_magnitude.apply_similarity, or a plain dot / cosine model); got modules "
            f"{[type(m).__name__ for m in layout.modules]}"
        )
    if store in _preserved(layout, similarity_fn_name):
        logger.info("prepare_for_store(%r): the model already ranks exactly under %s; nothing added", store, store)
        return layout
    if max_norm is None and not documents:
        raise ValueError(
            f"a {store!r} store needs the document-norm bound M for this model (gamma_document={gammas[1]:.3f} < 1): "
            "pass max_norm=M or documents=[a sample of the corpus] (CLI: --max-norm or --norm-texts)"
        )
    if documents:
        if tuple(model) != layout.modules:
            write_layout(model, layout)  # the documents are encoded through the layout that is measured
        norms = _document_norms(model, documents, batch_size)
        measured = float(norms.max())
        if max_norm is None:
            max_norm = measured * margin
            _check_max_norm(max_norm)
        elif max_norm > MAX_MARGIN * measured:
            raise ValueError(
                f"max_norm={max_norm:.6g} is more than {MAX_MARGIN:g} times the largest sample document norm "
                f"({measured:.6g}): float32 L2 distances (of size M²) could no longer tell the documents' scores "
                f"apart. Use M in [{measured:.6g}, {MAX_MARGIN * measured:.6g}], or leave max_norm out to use "
                f"margin × {measured:.6g}"
            )
        elif measured > max_norm:
            over = int((norms > max_norm).sum())
            warnings.warn(
                f"{over} of {len(documents)} sample document(s) have a norm above max_norm={max_norm:.6g} (largest "
                f"{measured:.6g}): a {store!r} store ranks them lower than the trained similarity does.",
                NormBoundWarning,
                stacklevel=3,
            )
    dim = layout.dimension
    if truncate_dim is not None:
        dim = truncate_dim if dim is None else min(dim, truncate_dim)
    if dim is None:
        raise ValueError("the model does not report its embedding dimension; cannot add the augmentation coordinate")
    logger.info("prepare_for_store(%r): appended MIPSAugment(max_norm=%.6g, dimension=%d)", store, max_norm, dim)
    return layout.plus(MIPSAugment(float(max_norm), int(dim)))


def set_default_route(model: SentenceTransformer, route: str | None) -> SentenceTransformer:
    """Let a role-less ``encode()`` use ``route`` (``"document"``) instead of raising; ``None`` restores the refusal.

    Trade-off: for role-unaware stacks (they call ``encode()`` for queries and documents) the top-k stays exact
    under an inner-product store, and under any metric when documents are unit vectors (γd = 1: dnorm), because
    encoding a query as a document changes its vector by a per-query factor only (``‖q‖^(γq−γd)``); their scores
    are then scaled per query, and a symmetric use (STS, clustering) of an asymmetric model is no longer refused.
    Models with ST's query/document ``Router`` and ``RoleNormalize`` models whose γq ≠ γd (learnable) refuse a
    role-less encode; the route sets the Router's default route and the ``RoleNormalize``'s ``allow_roleless`` /
    ``default_role`` (saved with the model).

    A model carrying :class:`MIPSAugment` (a cosine / L2 export of a variant with γd < 1) is refused: a query
    encoded as a document would get the documents' extra coordinate, and the store would rank wrongly.
    """
    _set_default_route(read_layout(model), route)
    return model


def _set_default_route(layout: Layout, route: str | None) -> None:
    if route is not None and route not in DEFAULT_ROUTES:
        raise ValueError(f"default route must be one of {DEFAULT_ROUTES} or None, got {route!r}")
    if route is not None and "mips_augment" in layout.kinds:
        raise ValueError(ROLELESS_STORE_REFUSAL)
    role_normalizers = layout.find_anywhere("role_normalize")
    for module in role_normalizers:  # a learnable / fractional γ: its role-less encode is refused without a route
        module.allow_roleless = route is not None
        if route is not None:
            module.default_role = route
    if layout.router is not None:
        layout.router.default_route = route
    elif not role_normalizers:
        logger.info("set_default_route: the model has no query/document Router; a role-less encode already works")


def convert_for_store(
    model: SentenceTransformer,
    similarity: str,
    store: str = "dot",
    *,
    max_norm: float | None = None,
    documents: Sequence[str] | None = None,
    margin: float = DEFAULT_MARGIN,
    default_route: str | None = None,
    batch_size: int = 32,
) -> SentenceTransformer:
    """``st-magnitude convert MODEL SIMILARITY --store STORE`` in Python: :func:`~st_magnitude.apply_similarity`,
    then :func:`prepare_for_store` and (opt-in) :func:`set_default_route`.

    A model that already carries a learnable γ̂ keeps it (``apply_similarity``'s default ``init_gamma=None``), so
    the export ranks as the trained model does. ``default_route`` with a cosine / L2 store and a variant whose
    documents keep magnitude (dot, qnorm, learnable) is refused before the model is touched
    (:func:`set_default_route`).
    """
    _check_store(store)
    if (
        default_route is not None
        and store != "dot"
        and (gammas_of(validate_similarity_name(similarity)) or (0, 0))[1] != 1
    ):
        raise ValueError(ROLELESS_STORE_REFUSAL)
    _check_margin(margin)
    _check_max_norm(max_norm)
    _check_convertible(model)
    # one read, one write: the conversion sees the bare backbone (any augmentation dropped), the store step appends
    # its own (measuring documents encodes them through the converted layout, which the model then holds first)
    converted, name = _converted(
        read_layout(model).without("mips_augment"),
        similarity,
        init_gamma=None,
        eps=DEFAULT_EPS,
        warn_on_strip=True,
        portable=True,
    )
    target = _for_store(
        model, converted, "dot", store, max_norm=max_norm, documents=documents, margin=margin, batch_size=batch_size
    )
    _serve(model, target, "dot")
    if default_route is not None:
        _set_default_route(target, default_route)
    logger.info(
        "convert_for_store: model now serves %r for a %r store with modules %s", name, store, list(target.kinds)
    )
    return model
