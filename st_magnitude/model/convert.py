"""Model surgery: make a SentenceTransformer carry its own similarity, and strip ``Normalize`` layers.

The central decision (docs/architecture.md): every variant is ``s(q, d) = φ_γq(q) · φ_γd(d)``, so a model serving a
variant emits φ_γq for queries and φ_γd for documents and is scored with a plain dot product. Then
``model.similarity(model.encode_query(q), model.encode_document(d))`` is the training similarity, and MTEB, BEIR,
ST's ``InformationRetrievalEvaluator`` and an inner-product vector store fed through the two roles score exactly what
was trained (cosine / L2 stores: :mod:`st_magnitude.model.stores`).

Portable export: for γ ∈ {0, 1} only ST's built-in modules are used —

==========  ===============================================================================
cosine      backbone + ``Normalize``                                  (no roles needed)
dot         backbone                                                  (no roles needed)
qnorm       ``Router.for_query_document(query=backbone + Normalize, document=backbone)``
dnorm       ``Router.for_query_document(query=backbone, document=backbone + Normalize)``
learnable   backbone + :class:`~st_magnitude.modules.RoleNormalize` (needs ``trust_remote_code=True``)
==========  ===============================================================================

The backbone modules are *shared* between the two routes (one set of weights; ST saves shared modules once). The
qnorm/dnorm ``Router`` has no default route, so stock ST raises on ``encode()`` without a task (paper 000
Prop. 2.1); nothing of ST is patched (the symmetry guard, :mod:`st_magnitude.model.guard`, is opt-in).
"""

from __future__ import annotations

import logging
import os
import shutil
import warnings
from collections.abc import Iterable
from pathlib import Path

from sentence_transformers import SentenceTransformer
from sentence_transformers.base.modules import Normalize, Router
from torch import nn

from st_magnitude._trust.owned import identity_of, remove_tree
from st_magnitude._trust.paths import check_model_folder
from st_magnitude._trust.stages import held_stage, unmark
from st_magnitude._warnings import MagnitudeCollapseWarning
from st_magnitude.model._layout import (
    NORMALISATIONS,
    ROUTE_DOCUMENT,
    ROUTE_QUERY,
    Layout,
    kind_of,
    read_layout,
    write_layout,
)
from st_magnitude.model._legacy_fit import refuse_fit_with_router
from st_magnitude.model._strip_plan import StripPlan, apply_strip_plan, plan_strip
from st_magnitude.model._swap import AtomicSwapUnavailable, exchange
from st_magnitude.model.card import update_model_card
from st_magnitude.model.info import TRAINING_SIMILARITY_ATTR
from st_magnitude.modules.role_normalize import RoleNormalize
from st_magnitude.similarity import (
    DEFAULT_EPS,
    LearnableSimilarity,
    PowerNormSimilarity,
    Similarity,
    gammas_of,
    is_carriable,
    name_of_gammas,
    similarity_names,
    validate_similarity_name,
)

logger = logging.getLogger(__name__)

__all__ = ["apply_similarity", "strip_normalize", "set_training_similarity"]


# ----------------------------------------------------------------------------------------------------------------
# surgery helpers: each reads a Layout and returns the Layout it wants; the caller writes it once
# ----------------------------------------------------------------------------------------------------------------
def _strip_list(modules: Iterable[nn.Module], at_end: bool = True) -> tuple[list[nn.Module], int, int]:
    """Remove the *trailing* normalisation modules (``at_end``: nothing follows the list in the model).

    Returns ``(kept, removed, inner)``: a ``Normalize`` that feeds a later module (e.g. ``[..., Normalize, Dense]``)
    is part of the encoder — removing it would change the embeddings — so it is kept and counted in ``inner``.
    """
    kept = list(modules)
    removed = 0
    while at_end and kept and kind_of(kept[-1]) in NORMALISATIONS:
        kept.pop()
        removed += 1
    return kept, removed, sum(1 for m in kept if kind_of(m) == "normalize")


def _warn_inner(inner: int, what: str, stacklevel: int = 3) -> None:
    if inner:
        warnings.warn(
            f"{what} kept {inner} Normalize module(s) that feed later modules (e.g. a Dense): they are part of the "
            "encoder, and removing them would change the embeddings. Only a trailing Normalize (or one at the end of "
            "a Router route) is removed.",
            UserWarning,
            stacklevel=stacklevel,
        )


def _backbone(layout: Layout) -> tuple[Layout, bool, int, int]:
    """The layout without its trailing normalisation. Unwraps a query/document Router that shares its backbone.

    Returns ``(backbone, two_tower, n_removed, n_inner)``: ``two_tower`` is set when the model's Router has genuinely
    different routes, which must be kept (the backbone layout then holds the Router with its stripped routes);
    ``n_inner`` counts the Normalize modules kept because later modules read their output (:func:`_strip_list`).
    """
    modules = list(layout.modules)
    if layout.router is not None:
        rest, removed, inner = _strip_list(modules[1:])
        routes_at_end = not rest  # a route's last module is the model's output only when nothing follows
        stripped = {name: _strip_list(seq, at_end=routes_at_end) for name, seq in layout.routes.items()}
        removed += sum(n for _, n, _ in stripped.values())
        cores = [[id(m) for m in seq] for seq, _, _ in stripped.values()]
        if all(c == cores[0] for c in cores):
            first = next(iter(stripped.values()))
            return Layout.of(list(first[0]) + rest), False, removed, inner + first[2]
        inner += sum(i for _, _, i in stripped.values())
        routes = {name: seq for name, (seq, _, _) in stripped.items()}
        return Layout.of([layout.router] + rest, routes), True, removed, inner
    kept, removed, inner = _strip_list(modules)
    return Layout.of(kept), False, removed, inner


def _fresh_normalize() -> Normalize:
    return Normalize()


def _check_convertible(model: SentenceTransformer) -> None:
    if not isinstance(model, SentenceTransformer):
        raise TypeError(f"apply_similarity expects a SentenceTransformer, got {type(model).__name__}")
    if model.truncate_dim is not None:
        raise ValueError(
            f"model.truncate_dim={model.truncate_dim}: sentence-transformers truncates *after* the model's "
            "normalisation, so a converted model's truncated embeddings would keep their full-dimension norm. Set "
            "model.truncate_dim = None, convert, then call st_magnitude.truncate_model(model, "
            f"{model.truncate_dim}) (it truncates before the normalisation)."
        )


def _resolve(similarity: str | Similarity) -> tuple[str, tuple[float, float] | None, tuple[float, float] | None]:
    """``(name, gammas, init_gamma)`` of what ``apply_similarity`` is asked to carry (``init_gamma``: a learnable
    similarity instance's own γ, else ``None``); refuses a similarity a model cannot carry."""
    name = similarity.name if isinstance(similarity, Similarity) else validate_similarity_name(similarity)
    if not (isinstance(similarity, PowerNormSimilarity) or (isinstance(similarity, str) and is_carriable(name))):
        carriable = ", ".join(similarity_names(carriable=True))
        raise ValueError(
            f"Similarity {name!r} is not a per-role rescaling and cannot be carried by a model; "
            f"apply_similarity accepts: {carriable} (or a PowerNormSimilarity instance)."
        )
    if isinstance(similarity, LearnableSimilarity):
        gammas = (similarity.gamma_query, similarity.gamma_document)
        return "learnable", gammas, gammas
    if isinstance(similarity, PowerNormSimilarity):
        gammas = (similarity.gamma_query, similarity.gamma_document)
        return name_of_gammas(*gammas) or "fractional", gammas, None
    return name, gammas_of(name), None


def _converted(
    layout: Layout,
    similarity: str | Similarity,
    *,
    init_gamma: float | tuple[float, float] | None,
    eps: float,
    warn_on_strip: bool,
    portable: bool,
) -> tuple[Layout, str]:
    """``(layout, name)``: the layout that serves ``similarity`` (see :func:`apply_similarity`), built from
    ``layout`` without touching the model; warnings point two frames up (the public caller's caller)."""
    name, gammas, own_gamma = _resolve(similarity)
    init_gamma = own_gamma if own_gamma is not None else init_gamma
    # a cosine model (plain, ending in Normalize) is about to lose its normalisation; re-converting an
    # already-converted model is not a strip
    was_cosine_model = not layout.carries and layout.gammas == (1.0, 1.0)
    trained = next((m for m in layout.find("role_normalize") if m.learnable), None)
    backbone, two_tower, removed, inner = _backbone(layout)
    if warn_on_strip:
        _warn_inner(inner, f"apply_similarity({name!r})", stacklevel=4)
    keeps_magnitude = name not in ("cosine",)
    if removed and keeps_magnitude and warn_on_strip and was_cosine_model:
        warnings.warn(
            f"apply_similarity({name!r}) removed {removed} Normalize module(s) so the model keeps embedding "
            "magnitude. If this model was pretrained with cosine, its norms carry little signal yet and fine-tuning "
            "with small data can collapse magnitude (paper 000 App. F/N.3: E5 with 82K pairs). Watch a dual "
            "dot/cosine validation metric.",
            MagnitudeCollapseWarning,
            stacklevel=3,
        )

    if name == "learnable" and init_gamma is None and trained is not None:
        kept = RoleNormalize(learnable=True, eps=eps)
        kept.to(trained.gamma_query_logit.device).load_state_dict(
            trained.state_dict()
        )  # the trained logits, bit for bit
        logger.info("apply_similarity: kept the trained γ̂ (%.6g, %.6g)", kept.gamma_query, kept.gamma_document)
        return backbone.plus(kept), name
    if name == "learnable":
        init_gamma = 0.5 if init_gamma is None else init_gamma
        gq, gd = (init_gamma, init_gamma) if isinstance(init_gamma, (int, float)) else init_gamma
        return backbone.plus(RoleNormalize(gq, gd, learnable=True, eps=eps)), name
    if name == "fractional" or (not portable and name in ("qnorm", "dnorm") and not two_tower):
        return backbone.plus(RoleNormalize(gammas[0], gammas[1], learnable=False, eps=eps)), name
    if name == "dot":
        return backbone, name
    if name == "cosine":
        return backbone.plus(_fresh_normalize()), name
    gq, gd = gammas
    if two_tower:
        # genuinely different towers: put the Normalize inside the route that needs it
        routes = dict(backbone.routes)
        for route, g in ((ROUTE_QUERY, gq), (ROUTE_DOCUMENT, gd)):
            if g == 1.0:
                if route not in routes:
                    raise ValueError(f"Router has routes {sorted(routes)}; {name!r} needs a {route!r} route.")
                routes[route] = (*routes[route], _fresh_normalize())
        return Layout.of(backbone.modules, routes), name
    q_route = list(backbone.modules) + ([_fresh_normalize()] if gq == 1.0 else [])
    d_route = list(backbone.modules) + ([_fresh_normalize()] if gd == 1.0 else [])
    # no default route: stock ST then refuses a role-less encode (paper 000 Prop. 2.1) without any patching
    router = Router.for_query_document(
        query_modules=q_route, document_modules=d_route, default_route=None, allow_empty_key=False
    )
    return Layout.of([router]), name


def _serve(model: SentenceTransformer, layout: Layout, similarity_fn_name: str) -> None:
    """Write ``layout`` into ``model`` (the one write of a conversion), set its similarity and update its card."""
    write_layout(model, layout)
    model.similarity_fn_name = similarity_fn_name
    update_model_card(model)


# ----------------------------------------------------------------------------------------------------------------
# apply a similarity, strip the normalisation
# ----------------------------------------------------------------------------------------------------------------
def apply_similarity(
    model: SentenceTransformer,
    similarity: str | Similarity,
    *,
    init_gamma: float | tuple[float, float] | None = None,
    eps: float = DEFAULT_EPS,
    warn_on_strip: bool = True,
    portable: bool = True,
) -> SentenceTransformer:
    """Turn ``model`` (in place) into a model that serves ``similarity`` with its own query/document roles.

    Removes the trailing ``Normalize`` (also at the end of Router routes; one that feeds a later module, e.g. a
    ``Dense``, is part of the encoder and is kept, with a warning), adds the role-specific rescaling φ_γ, and sets
    ``model.similarity_fn_name = "dot"``. For cosine/dot/qnorm/dnorm only built-in ST modules are used, so the saved
    model loads in stock sentence-transformers without ``trust_remote_code``; ``learnable`` adds a
    :class:`~st_magnitude.modules.RoleNormalize` holding γ̂q, γ̂d (trained, saved and reloaded with the model).

    Training recipes (the model output is φ_γ(v) when the role is known, the raw embedding when it is not):

    - ``SentenceTransformerTrainer`` with ``router_mapping={"anchor": "query", "positive": "document", ...}``: the
      model applies φ per column, so score with ``get_similarity(name)`` for the fixed variants (φ is idempotent at
      γ ∈ {0, 1}) or ``get_similarity("dot")`` for any variant, learnable included.
    - legacy ``model.fit`` (no roles in training; use ``portable=False`` for qnorm/dnorm): the model passes the raw
      embedding through, so score with ``st_magnitude.model_similarity(model)``, which applies the variant — for
      learnable with the model's own γ̂, so γ̂ is trained and saved with the model.
    - st-magnitude's losses detect a converted model and do the right thing in both cases.

    Re-applying a variant to an already converted model replaces the old one.

    Args:
        model: any SentenceTransformer.
        similarity: ``"cosine"``, ``"dot"``, ``"qnorm"``, ``"dnorm"``, ``"learnable"`` or a :class:`Similarity`
            (a ``PowerNormSimilarity`` with fractional γ is carried as a fixed :class:`RoleNormalize`).
        init_gamma: initial γ for ``learnable``, a float or a (γq, γd) pair. ``None`` (default): the model's trained
            γ̂ when it already carries a learnable ``RoleNormalize`` (its parameters copied exactly, so
            re-converting a trained model, e.g. ``convert MODEL learnable --store cosine`` or
            :func:`~st_magnitude.convert_for_store`, serves what training learned), else 0.5 (paper).
        eps: norm floor for the rescaling.
        warn_on_strip: warn when a ``Normalize`` is removed to keep magnitude (cosine-pretrained models can collapse,
            paper 000 App. F / N.3).
        portable: for qnorm/dnorm, build ST's built-in ``Router`` (default; loads anywhere, and the Trainer then
            requires ``router_mapping``). ``False`` uses a fixed :class:`RoleNormalize` instead, which the legacy
            ``model.fit`` can train (``fit`` cannot pass ``router_mapping``, and ST refuses to train a Router without
            it); call ``apply_similarity(model, name)`` again before saving to get the portable form back.

    Returns:
        The same ``model`` object, converted.
    """
    _check_convertible(model)
    layout, name = _converted(
        read_layout(model), similarity, init_gamma=init_gamma, eps=eps, warn_on_strip=warn_on_strip, portable=portable
    )
    _serve(model, layout, "dot")
    refuse_fit_with_router(model)  # ST's legacy fit cannot pass the router_mapping a Router model needs
    logger.info("apply_similarity: model now serves %r with modules %s", name, [type(m).__name__ for m in model])
    return model


def strip_normalize(
    model: SentenceTransformer | str | os.PathLike,
    output_path: str | os.PathLike | None = None,
    *,
    similarity_fn_name: str = "dot",
    warn: bool = True,
) -> SentenceTransformer | Path:
    """Remove the trailing ``Normalize`` (also at the end of ``Router`` routes) and switch the similarity to dot.

    Only a ``Normalize`` whose output is the model's output is removed; one that feeds a later module (e.g.
    ``[Transformer, Pooling, Normalize, Dense]``) is part of the encoder and is kept, with a warning.

    Works on a loaded model (returned, modified in place) or on a saved model folder, edited at file level without
    loading any weights (``output_path`` = where to write the stripped copy; ``None`` edits the folder in place,
    atomically: the edited copy is built beside it and swapped in with one atomic exchange, so the folder names a
    complete model at every instant; where the platform cannot swap atomically, in place is refused; returns the
    folder's path). The folder is taken with links and ``..`` resolved: a symlink to a model folder (or
    ``MODEL/sub/..``) strips the folder it leads to, and the link stays a link to it. Every path the folder names
    must stay inside it (``UnsafeModelPathError`` otherwise).

    Warns with :class:`MagnitudeCollapseWarning`: a cosine-pretrained model's norms were never trained, and
    fine-tuning it with a magnitude-keeping similarity on little data can collapse (paper 000 App. F, N.3).
    """
    if similarity_fn_name not in SentenceTransformer.SUPPORTED_SIMILARITY_FN_NAMES:
        raise ValueError(
            f"similarity_fn_name must be one of {SentenceTransformer.SUPPORTED_SIMILARITY_FN_NAMES}, "
            f"got {similarity_fn_name!r}"
        )
    if isinstance(model, SentenceTransformer):
        backbone, removed = _backbone_strip_only(read_layout(model))
        _serve(model, backbone, similarity_fn_name)  # the base README's "normalise + cosine" no longer holds
        _warn_strip(removed, warn)
        return model
    return _strip_normalize_folder(
        Path(model), None if output_path is None else Path(output_path), similarity_fn_name, warn
    )


def _backbone_strip_only(layout: Layout) -> tuple[Layout, int]:
    """Remove trailing Normalize modules only (RoleNormalize is kept: it is not a plain normalisation).

    A Router's route-end Normalize counts as trailing when the Router is the last module left.
    """
    kinds = list(layout.kinds)
    removed = 0
    while kinds and kinds[-1] == "normalize":
        kinds.pop()
        removed += 1
    kept = layout.modules[: len(kinds)]
    inner = sum(1 for k in kinds if k == "normalize")
    routes = dict(layout.routes)
    if layout.router is not None:
        for name, seq in layout.routes.items():
            route = list(seq)
            while len(kept) == 1 and route and kind_of(route[-1]) == "normalize":
                route.pop()
                removed += 1
            inner += sum(1 for x in route if kind_of(x) == "normalize")
            routes[name] = tuple(route)
    _warn_inner(inner, "strip_normalize", stacklevel=4)
    return Layout(kept, tuple(kinds), routes), removed


def _warn_strip(removed: int, warn: bool) -> None:
    if removed == 0:
        logger.info("strip_normalize: the model had no Normalize module; nothing removed")
        return
    if warn:
        warnings.warn(
            f"strip_normalize removed {removed} Normalize module(s); the similarity is now dot. A model pretrained "
            "with cosine has untrained norms: fine-tuning it with a magnitude-keeping similarity on small data can "
            "collapse magnitude (paper 000 App. F/N.3). Monitor cosine and dot validation metrics together.",
            MagnitudeCollapseWarning,
            stacklevel=3,
        )


def _link_or_copy(src: str, dst: str) -> str:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    return dst


def _copy_error(src: Path, exc: shutil.Error) -> OSError:
    """``shutil.copytree``'s error (a list of every file that failed, thousands of characters) as one line: how many
    files failed and the first of them."""
    failed = exc.args[0] if exc.args and isinstance(exc.args[0], list) else []
    first = failed[0] if failed and isinstance(failed[0], tuple) and len(failed[0]) == 3 else None
    detail = f"the first, {first[0]}: {' '.join(str(first[2]).split())}" if first else " ".join(str(exc).split())
    return OSError(
        f"cannot copy the model {src}: {len(failed) or 'some'} file(s) failed ({detail[:300]}); nothing was written"
    )


def _strip_normalize_folder(src: Path, dst: Path | None, similarity_fn_name: str, warn: bool) -> Path:
    """Strip a saved folder. The edit is planned (and every folder it would delete checked) on ``src`` before any
    write, then made on a staging copy beside the target, which is renamed into place, so a failure at any step
    leaves the original (or no output) behind, never a half-edited model."""
    # the folder itself, links and ``..`` resolved: ``strip LINK`` strips the folder LINK leads to (the link stays a
    # link to it), and ``MODEL/sub/..`` is MODEL, so the staging folder lies beside the model, never inside it
    try:
        src = src.resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop (RuntimeError before Python 3.13)
        raise FileNotFoundError(f"{src} is not a saved SentenceTransformer folder ({exc})") from None
    if src.parent == src:
        raise ValueError(f"cannot strip {src}: the root folder has no folder beside it to stage the edit in")
    modules_file = src / "modules.json"
    if not modules_file.is_file():
        raise FileNotFoundError(f"{src} is not a saved SentenceTransformer folder (no modules.json)")
    check_model_folder(src)  # every path it names stays inside it: nothing outside is read, copied or deleted
    plan = plan_strip(src)  # refuses a deletion that would reach the folder itself or a folder another entry uses
    if dst is not None:
        from st_magnitude._trust.outputs import output_path

        dst = output_path(dst)  # OUT/sub/.. is OUT: the emptiness check and the rename name the folder itself
    if dst is not None and dst.exists() and (not dst.is_dir() or any(dst.iterdir())):
        raise FileExistsError(f"output_path {dst} exists and is not empty")
    target = (dst if dst is not None else src).absolute()
    with held_stage(target, infix="strip-", run="strip") as stage:  # a killed strip's stage: removed here
        _strip_into(src, dst, stage, plan, similarity_fn_name)
    _warn_inner(plan.inner, "strip_normalize")
    _warn_strip(plan.removed, warn)
    return target if dst is None else dst


def _strip_into(src: Path, dst: Path | None, stage: Path, plan: StripPlan, similarity_fn_name: str) -> None:
    """Build the stripped copy in ``stage`` and put it in place: exchanged with ``src``, or renamed to ``dst``."""
    try:
        # in place: hard links are safe (the original folder is discarded); a copy elsewhere gets its own files
        try:
            shutil.copytree(
                src, stage, dirs_exist_ok=True, copy_function=_link_or_copy if dst is None else shutil.copy2
            )
        except shutil.Error as exc:
            raise _copy_error(src, exc) from None
        apply_strip_plan(plan, stage, similarity_fn_name)
        unmark(stage)  # the stage becomes the model: the marker that it is a stage goes
        if dst is None:
            original = identity_of(src)  # after the swap, the stage's name holds this folder: the old model
            try:  # one atomic swap: ``src`` names a complete model (the old or the stripped one) at every instant
                exchange(stage, src)
            except AtomicSwapUnavailable as exc:
                raise AtomicSwapUnavailable(
                    exc.errno,
                    f"cannot strip {src} in place: {exc.strerror}, and replacing a folder by two renames would leave "
                    "no model if interrupted between them; write a copy instead (--output / output_path)",
                ) from None
            remove_tree(stage, expected=original)  # now the old model, replaced in place: that folder only
        else:
            if dst.exists():
                dst.rmdir()
            os.rename(stage, dst)
    except BaseException:
        remove_tree(stage)  # this run's own stage, nothing else
        raise


# ----------------------------------------------------------------------------------------------------------------
# serve what a recipe trained
# ----------------------------------------------------------------------------------------------------------------
def set_training_similarity(
    model: nn.Module, similarity: str, temperature: float = 1.0, *, recipe: str | None = None
) -> None:
    """Record that ``model`` is trained with ``similarity`` on its outputs at temperature τ, and serve it.

    Sets ``model.similarity_fn_name`` to ``similarity`` (so ``model.similarity`` and every ST evaluator score what
    the loss trains), stores ``{"similarity", "temperature", "recipe"}`` as ``model.st_magnitude_training``
    (:data:`TRAINING_SIMILARITY_ATTR`, read by :func:`training_temperature`), and updates the model card. Paper 003's
    recipes call it: BERT → ``("dot", 1.0)``, Ettin → ``("cosine", 0.02)``.

    Only ``cosine`` and ``dot`` are accepted: they are what ST's ``similarity_fn_name`` can serve on the outputs.
    For qnorm / dnorm / learnable the model must carry the rescaling: use :func:`apply_similarity`.
    """
    name = validate_similarity_name(similarity)
    if name not in ("cosine", "dot"):
        raise ValueError(
            f"set_training_similarity serves 'cosine' or 'dot' on the model outputs, got {name!r}; "
            "make the model carry qnorm/dnorm/learnable with st_magnitude.apply_similarity(model, name)"
        )
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or not (0 < temperature < float("inf"))
    ):
        raise ValueError(f"temperature must be a positive finite number, got {temperature!r}")
    setattr(model, TRAINING_SIMILARITY_ATTR, {"similarity": name, "temperature": float(temperature), "recipe": recipe})
    if isinstance(model, SentenceTransformer):
        model.similarity_fn_name = name
        update_model_card(model)
    logger.info("set_training_similarity: model serves %r, trained at temperature %g", name, temperature)
