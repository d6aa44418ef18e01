"""The similarity names and registry, torch-free, so the CLI can build its argument choices without torch.

:mod:`st_magnitude.similarity` re-exports everything here; import the names from there.
"""

from __future__ import annotations

from dataclasses import dataclass

#: (γq, γd) of the four fixed variants: the corners of the learnable square (paper 000 eqs. 3–7).
CORNER_GAMMAS: dict[str, tuple[float, float]] = {
    "cosine": (1.0, 1.0),
    "dot": (0.0, 0.0),
    "qnorm": (1.0, 0.0),
    "dnorm": (0.0, 1.0),
}

_ALIASES = {
    "cos": "cosine",
    "cos_sim": "cosine",
    "dot_product": "dot",
    "dot_score": "dot",
    "query_norm": "qnorm",
    "querynorm": "qnorm",
    "doc_norm": "dnorm",
    "document_norm": "dnorm",
    "docnorm": "dnorm",
    "learnable_norm": "learnable",
    "sim_tn": "tn",
    "tn_similarity": "tn",
}


# ----------------------------------------------------------------------------------------------------------------
# registry: the one place that says which names exist and what each can do (CLI choices, apply_similarity, ...)
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SimilaritySpec:
    """What one registered similarity name can do.

    Attributes:
        name: canonical name (what :func:`get_similarity` accepts; aliases resolve to it).
        power_norm: a member of the power-norm family s(q, d) = qᵀd / (‖q‖^γq ‖d‖^γd) (paper 000 eqs. 3–7): its class
            is a :class:`~st_magnitude.similarity.PowerNormSimilarity` and has ``gammas()``. Only these have γ.
        gammas: the fixed (γq, γd) of a power-norm member; ``None`` when γ is learned (``learnable``) or the
            similarity has no γ at all (``tn``, not a power-norm member).
        carriable: a model can carry it (:func:`st_magnitude.apply_similarity`, ``st-magnitude convert``), i.e. it is
            φ_γq(q)·φ_γd(d) and embeddings can be scored with a plain dot product after the model's rescaling.
        symmetric: s(a, b) == s(b, a) for *every* parameter value (paper 000 Prop. 2.1). ``learnable`` is False:
            it is symmetric only while γq == γd.
        learnable: it holds trainable parameters.
    """

    name: str
    power_norm: bool
    gammas: tuple[float, float] | None
    carriable: bool
    symmetric: bool
    learnable: bool


#: Every similarity name, in display order, with its capabilities. Read it through :func:`similarity_names`,
#: :func:`is_carriable`, :func:`gammas_of` and :func:`similarity_spec`.
SIMILARITY_REGISTRY: dict[str, SimilaritySpec] = {
    **{
        name: SimilaritySpec(name, power_norm=True, gammas=g, carriable=True, symmetric=g[0] == g[1], learnable=False)
        for name, g in CORNER_GAMMAS.items()
    },
    "learnable": SimilaritySpec(
        "learnable", power_norm=True, gammas=None, carriable=True, symmetric=False, learnable=True
    ),
    "tn": SimilaritySpec("tn", power_norm=False, gammas=None, carriable=False, symmetric=True, learnable=False),
}

#: Names accepted by :func:`st_magnitude.get_similarity`: the power-norm family and sim_TN (L2Dir, paper 002).
SIMILARITY_NAMES: tuple[str, ...] = tuple(SIMILARITY_REGISTRY)

#: Similarities a model can carry with :func:`st_magnitude.apply_similarity` (per-role rescalings φ_γq, φ_γd).
CARRIABLE_SIMILARITY_NAMES: tuple[str, ...] = tuple(n for n, spec in SIMILARITY_REGISTRY.items() if spec.carriable)


def validate_similarity_name(name: str) -> str:
    """Return the canonical similarity name, or raise a ``ValueError`` that lists the valid names."""
    if not isinstance(name, str):
        raise TypeError(f"similarity must be a name (one of {list(SIMILARITY_NAMES)}), got {type(name).__name__}")
    key = name.strip().lower().replace("-", "_")
    key = _ALIASES.get(key, key)
    if key not in SIMILARITY_NAMES:
        raise ValueError(f"Unknown similarity {name!r}. Valid names: {', '.join(SIMILARITY_NAMES)}.")
    return key


def similarity_spec(name: str) -> SimilaritySpec:
    """The :class:`SimilaritySpec` of a name or alias; unknown names raise ``ValueError`` listing the valid ones."""
    return SIMILARITY_REGISTRY[validate_similarity_name(name)]


def similarity_names(
    *,
    carriable: bool | None = None,
    symmetric: bool | None = None,
    learnable: bool | None = None,
    fixed_gammas: bool | None = None,
    power_norm: bool | None = None,
) -> tuple[str, ...]:
    """Canonical names (registry order) matching every filter that is not ``None``.

    Examples: ``similarity_names()`` → all six; ``similarity_names(carriable=True)`` → cosine, dot, qnorm, dnorm,
    learnable (what ``convert`` accepts); ``similarity_names(fixed_gammas=True)`` → the four corners;
    ``similarity_names(symmetric=True)`` → cosine, dot, tn (valid for STS / clustering);
    ``similarity_names(power_norm=True)`` → the members that have γ (the four corners and learnable).
    """
    out = []
    for name, spec in SIMILARITY_REGISTRY.items():
        if power_norm is not None and spec.power_norm != power_norm:
            continue
        if carriable is not None and spec.carriable != carriable:
            continue
        if symmetric is not None and spec.symmetric != symmetric:
            continue
        if learnable is not None and spec.learnable != learnable:
            continue
        if fixed_gammas is not None and (spec.gammas is not None) != fixed_gammas:
            continue
        out.append(name)
    return tuple(out)


def is_carriable(name: str) -> bool:
    """Whether a model can carry the similarity (``apply_similarity``); unknown names raise ``ValueError``."""
    return similarity_spec(name).carriable


def gammas_of(name: str) -> tuple[float, float] | None:
    """The fixed (γq, γd) of a name, or ``None`` for ``learnable`` (learned γ) and ``tn`` (no γ at all)."""
    return similarity_spec(name).gammas


def name_of_gammas(gamma_query: float, gamma_document: float) -> str | None:
    """The registered name whose fixed γ are (γq, γd) — ``(1, 0)`` → ``"qnorm"`` — or ``None`` (fractional γ).

    The one γ → name lookup of the package (model cards, loss configs, ``apply_similarity``, descriptions).
    """
    gammas = (float(gamma_query), float(gamma_document))
    return next((name for name, spec in SIMILARITY_REGISTRY.items() if spec.gammas == gammas), None)
