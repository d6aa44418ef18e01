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
import tempfile
import warnings
from collections.abc import Iterable
from pathlib import Path

from sentence_transformers import SentenceTransformer
from sentence_transformers.base.modules import Normalize, Router
from torch import nn

from st_magnitude._trust.paths import check_model_folder
from st_magnitude._warnings import MagnitudeCollapseWarning
from st_magnitude.model._strip_plan import apply_strip_plan, plan_strip
from st_magnitude.model._swap import AtomicSwapUnavailable, exchange
from st_magnitude.model.card import update_model_card
from st_magnitude.model.info import (
    _ROUTE_DOCUMENT,
    _ROUTE_QUERY,
    TRAINING_SIMILARITY_ATTR,
    _is_normalize,
    _route_lists,
    carried_similarity,
    model_gammas,
)
from st_magnitude.modules._surgery import replace_modules
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
# surgery helpers
# ----------------------------------------------------------------------------------------------------------------
def _is_normalisation(m: nn.Module) -> bool:
    return _is_normalize(m) or isinstance(m, RoleNormalize)


def _strip_list(modules: Iterable[nn.Module], at_end: bool = True) -> tuple[list[nn.Module], int, int]:
    """Remove the *trailing* normalisation modules (``at_end``: nothing follows the list in the model).

    Returns ``(kept, removed, inner)``: a ``Normalize`` that feeds a later module (e.g. ``[..., Normalize, Dense]``)
    is part of the encoder — removing it would change the embeddings — so it is kept and counted in ``inner``.
    """
    kept = list(modules)
    removed = 0
    while at_end and kept and _is_normalisation(kept[-1]):
        kept.pop()
        removed += 1
    return kept, removed, sum(1 for m in kept if _is_normalize(m))


def _warn_inner(inner: int, what: str) -> None:
    if inner:
        warnings.warn(
            f"{what} kept {inner} Normalize module(s) that feed later modules (e.g. a Dense): they are part of the "
            "encoder, and removing them would change the embeddings. Only a trailing Normalize (or one at the end of "
            "a Router route) is removed.",
            UserWarning,
            stacklevel=3,
        )


def _backbone(model: SentenceTransformer) -> tuple[list[nn.Module], Router | None, int, int]:
    """Modules without their trailing normalisation. Unwraps a query/document Router that shares its backbone.

    Returns ``(modules, two_tower_router, n_removed, n_inner)``: ``two_tower_router`` is set (and stripped in place)
    when the model's Router has genuinely different routes, which must be kept; ``n_inner`` counts the Normalize
    modules kept because later modules read their output (:func:`_strip_list`).
    """
    modules = list(model)
    if modules and isinstance(modules[0], Router):
        router = modules[0]
        rest, removed, inner = _strip_list(modules[1:])
        routes_at_end = not rest  # a route's last module is the model's output only when nothing follows
        stripped = {name: _strip_list(seq, at_end=routes_at_end) for name, seq in _route_lists(router).items()}
        removed += sum(n for _, n, _ in stripped.values())
        cores = [[id(m) for m in seq] for seq, _, _ in stripped.values()]
        if all(c == cores[0] for c in cores):
            first = next(iter(stripped.values()))
            return list(first[0]) + rest, None, removed, inner + first[2]
        inner += sum(i for _, _, i in stripped.values())
        for name, (seq, _, _) in stripped.items():
            router.sub_modules[name] = nn.Sequential(*seq)
        return [router] + rest, router, removed, inner
    kept, removed, inner = _strip_list(modules)
    return kept, None, removed, inner


def _fresh_normalize() -> Normalize:
    return Normalize()


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
    if not isinstance(model, SentenceTransformer):
        raise TypeError(f"apply_similarity expects a SentenceTransformer, got {type(model).__name__}")
    if model.truncate_dim is not None:
        raise ValueError(
            f"model.truncate_dim={model.truncate_dim}: sentence-transformers truncates *after* the model's "
            "normalisation, so a converted model's truncated embeddings would keep their full-dimension norm. Set "
            "model.truncate_dim = None, convert, then call st_magnitude.truncate_model(model, "
            f"{model.truncate_dim}) (it truncates before the normalisation)."
        )
    name = similarity.name if isinstance(similarity, Similarity) else validate_similarity_name(similarity)
    if not (isinstance(similarity, PowerNormSimilarity) or (isinstance(similarity, str) and is_carriable(name))):
        carriable = ", ".join(similarity_names(carriable=True))
        raise ValueError(
            f"Similarity {name!r} is not a per-role rescaling and cannot be carried by a model; "
            f"apply_similarity accepts: {carriable} (or a PowerNormSimilarity instance)."
        )
    if isinstance(similarity, LearnableSimilarity):
        name, gammas = "learnable", (similarity.gamma_query, similarity.gamma_document)
        init_gamma = gammas
    elif isinstance(similarity, PowerNormSimilarity):
        gammas = (similarity.gamma_query, similarity.gamma_document)
        name = name_of_gammas(*gammas) or "fractional"
    else:
        gammas = gammas_of(name)

    # a cosine model (plain, ending in Normalize) is about to lose its normalisation; re-converting an
    # already-converted model is not a strip
    was_cosine_model = carried_similarity(model) is None and model_gammas(model) == (1.0, 1.0)
    trained = next((m for m in model if isinstance(m, RoleNormalize) and m.learnable), None)
    backbone, two_tower, removed, inner = _backbone(model)
    if warn_on_strip:
        _warn_inner(inner, f"apply_similarity({name!r})")
    keeps_magnitude = name not in ("cosine",)
    if removed and keeps_magnitude and warn_on_strip and was_cosine_model:
        warnings.warn(
            f"apply_similarity({name!r}) removed {removed} Normalize module(s) so the model keeps embedding "
            "magnitude. If this model was pretrained with cosine, its norms carry little signal yet and fine-tuning "
            "with small data can collapse magnitude (paper 000 App. F/N.3: E5 with 82K pairs). Watch a dual "
            "dot/cosine validation metric.",
            MagnitudeCollapseWarning,
            stacklevel=2,
        )

    if name == "learnable" and init_gamma is None and trained is not None:
        kept = RoleNormalize(learnable=True, eps=eps)
        kept.to(trained.gamma_query_logit.device).load_state_dict(
            trained.state_dict()
        )  # the trained logits, bit for bit
        new = backbone + [kept]
        logger.info("apply_similarity: kept the trained γ̂ (%.6g, %.6g)", kept.gamma_query, kept.gamma_document)
    elif name == "learnable":
        init_gamma = 0.5 if init_gamma is None else init_gamma
        gq, gd = (init_gamma, init_gamma) if isinstance(init_gamma, (int, float)) else init_gamma
        new = backbone + [RoleNormalize(gq, gd, learnable=True, eps=eps)]
    elif name == "fractional":
        new = backbone + [RoleNormalize(gammas[0], gammas[1], learnable=False, eps=eps)]
    elif not portable and name in ("qnorm", "dnorm") and two_tower is None:
        new = backbone + [RoleNormalize(gammas[0], gammas[1], learnable=False, eps=eps)]
    elif name == "dot":
        new = backbone
    elif name == "cosine":
        new = backbone + [_fresh_normalize()]
    elif two_tower is not None:
        # genuinely different towers: put the Normalize inside the route that needs it
        gq, gd = gammas
        for route, g in ((_ROUTE_QUERY, gq), (_ROUTE_DOCUMENT, gd)):
            if g == 1.0:
                if route not in two_tower.sub_modules:
                    raise ValueError(
                        f"Router has routes {sorted(two_tower.sub_modules)}; {name!r} needs a {route!r} route."
                    )
                two_tower.sub_modules[route].append(_fresh_normalize())
        new = backbone
    else:
        gq, gd = gammas
        q_route = backbone + ([_fresh_normalize()] if gq == 1.0 else [])
        d_route = backbone + ([_fresh_normalize()] if gd == 1.0 else [])
        # no default route: stock ST then refuses a role-less encode (paper 000 Prop. 2.1) without any patching
        new = [
            Router.for_query_document(
                query_modules=q_route, document_modules=d_route, default_route=None, allow_empty_key=False
            )
        ]

    replace_modules(model, new)
    model.similarity_fn_name = "dot"
    update_model_card(model)
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
    folder's path). Every path the folder names must stay inside it (``UnsafeModelPathError`` otherwise).

    Warns with :class:`MagnitudeCollapseWarning`: a cosine-pretrained model's norms were never trained, and
    fine-tuning it with a magnitude-keeping similarity on little data can collapse (paper 000 App. F, N.3).
    """
    if similarity_fn_name not in SentenceTransformer.SUPPORTED_SIMILARITY_FN_NAMES:
        raise ValueError(
            f"similarity_fn_name must be one of {SentenceTransformer.SUPPORTED_SIMILARITY_FN_NAMES}, "
            f"got {similarity_fn_name!r}"
        )
    if isinstance(model, SentenceTransformer):
        backbone, _, removed = _backbone_strip_only(model)
        replace_modules(model, backbone)
        model.similarity_fn_name = similarity_fn_name
        update_model_card(model)  # the base README's "normalise + cosine" instructions no longer hold
        _warn_strip(removed, warn)
        return model
    return _strip_normalize_folder(
        Path(model), None if output_path is None else Path(output_path), similarity_fn_name, warn
    )


def _backbone_strip_only(model: SentenceTransformer) -> tuple[list[nn.Module], None, int]:
    """Remove trailing Normalize modules only (RoleNormalize is kept: it is not a plain normalisation).

    A Router's route-end Normalize counts as trailing when the Router is the last module left.
    """
    kept = list(model)
    removed = 0
    while kept and _is_normalize(kept[-1]):
        kept.pop()
        removed += 1
    inner = 0
    for i, m in enumerate(kept):
        if isinstance(m, Router):
            for name, seq in list(m.sub_modules.items()):
                route = list(seq)
                while i == len(kept) - 1 and route and _is_normalize(route[-1]):
                    route.pop()
                    removed += 1
                inner += sum(1 for x in route if _is_normalize(x))
                m.sub_modules[name] = nn.Sequential(*route)
        elif _is_normalize(m):
            inner += 1
    _warn_inner(inner, "strip_normalize")
    return kept, None, removed


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


def _strip_normalize_folder(src: Path, dst: Path | None, similarity_fn_name: str, warn: bool) -> Path:
    """Strip a saved folder. The edit is planned (and every folder it would delete checked) on ``src`` before any
    write, then made on a staging copy beside the target, which is renamed into place, so a failure at any step
    leaves the original (or no output) behind, never a half-edited model."""
    modules_file = src / "modules.json"
    if not modules_file.is_file():
        raise FileNotFoundError(f"{src} is not a saved SentenceTransformer folder (no modules.json)")
    check_model_folder(src)  # every path it names stays inside it: nothing outside is read, copied or deleted
    plan = plan_strip(src)  # refuses a deletion that would reach the folder itself or a folder another entry uses
    if dst is not None and dst.exists() and (not dst.is_dir() or any(dst.iterdir())):
        raise FileExistsError(f"output_path {dst} exists and is not empty")
    target = (dst if dst is not None else src).absolute()
    target.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{target.name}.strip-", dir=target.parent))
    try:
        # in place: hard links are safe (the original folder is discarded); a copy elsewhere gets its own files
        shutil.copytree(src, stage, dirs_exist_ok=True, copy_function=_link_or_copy if dst is None else shutil.copy2)
        apply_strip_plan(plan, stage, similarity_fn_name)
        if dst is None:
            try:  # one atomic swap: ``src`` names a complete model (the old or the stripped one) at every instant
                exchange(stage, src)
            except AtomicSwapUnavailable as exc:
                raise AtomicSwapUnavailable(
                    exc.errno,
                    f"cannot strip {src} in place: {exc.strerror}, and replacing a folder by two renames would leave "
                    "no model if interrupted between them; write a copy instead (--output / output_path)",
                ) from None
            shutil.rmtree(stage, ignore_errors=True)  # now the old model
        else:
            if dst.exists():
                dst.rmdir()
            os.rename(stage, dst)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    _warn_inner(plan.inner, "strip_normalize")
    _warn_strip(plan.removed, warn)
    return target if dst is None else dst


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
