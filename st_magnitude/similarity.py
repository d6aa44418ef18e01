"""The magnitude-aware similarities — the only place this math lives — and the classes behind the registry.

Contract: every similarity is a :class:`Similarity` (matrix form, pairwise form, ``symmetric``, ``name``). The
power-norm family (:class:`PowerNormSimilarity`: cosine, dot, qnorm, dnorm, learnable) adds γ and the per-role
rescalings a model can carry; ``tn`` (sim_TN, paper 002) is a :class:`Similarity` with neither. Which names exist and
what each can do (class, symmetric, carriable, fixed γ) is answered by one registry: :func:`similarity_spec`,
:func:`similarity_names`, :func:`name_of_gammas`, :func:`similarity_class` (names in the torch-free
``st_magnitude._similarity_names``, classes here).

Every member of paper 000 ("Beyond the Unit Hypersphere", Feng & Watanabe) is a per-role rescaling followed by a
dot product::

    s(q, d) = φ_γq(q) · φ_γd(d),        φ_γ(v) = v / ‖v‖^γ

    cosine (1, 1)   paper eq. 3:  qᵀd / (‖q‖‖d‖)
    dot    (0, 0)   paper eq. 4:  qᵀd
    qnorm  (1, 0)   paper eq. 5:  q̂ᵀd = ‖d‖ cos θ
    dnorm  (0, 1)   paper eq. 6:  qᵀd̂ = ‖q‖ cos θ
    learnable       paper eq. 7:  qᵀd / (‖q‖^γq ‖d‖^γd),  γ = sigmoid(γ̂), γ̂ initialised at 0 (γ = 0.5)

Each similarity is an :class:`torch.nn.Module` with a *matrix* form ``sim(Q[B, n], D[M, n]) -> [B, M]`` (its
``forward``, so it can be passed as ``similarity_fct`` to sentence-transformers losses such as
``MultipleNegativesRankingLoss``) and a *pairwise* form ``sim.pairwise(Q[B, n], D[B, n]) -> [B]`` (for
``MarginMSELoss``-style losses). Norms are eps-safe: ``‖v‖`` is clamped from below by ``eps`` (one ``eps`` for the
matrix and the pairwise form, cosine included), so a zero vector gives a zero score and a *finite* gradient, never
NaN. The gradient is not zero: inside the ball ‖v‖ < eps, φ_γ(v) = v / eps^γ is linear, so ∂s/∂v is the upstream
gradient times eps^−γ — up to 1e8 for γ = 1 at the default eps = 1e-8 (``tests/test_similarity.py`` checks the
exact value). Keep zero vectors out of training batches.

Roles matter: only ``cosine`` and ``dot`` (and ``learnable`` with γq = γd) are symmetric (paper 000 Prop. 2.1).
The first argument is always the query side, the second the document side.
"""

from __future__ import annotations

import inspect
import logging
import math
from typing import Any

import torch
from torch import Tensor, nn

from st_magnitude._cpu_shortcuts import takes_cpu_shortcut
from st_magnitude._exact_sq_dist import exact_sq_dist
from st_magnitude._similarity_names import (  # torch-free, for the CLI; re-exported here
    CARRIABLE_SIMILARITY_NAMES,
    CORNER_GAMMAS,
    SIMILARITY_NAMES,
    SIMILARITY_REGISTRY,
    SimilaritySpec,
    gammas_of,
    is_carriable,
    name_of_gammas,
    similarity_names,
    similarity_spec,
    validate_similarity_name,
)

logger = logging.getLogger(__name__)

DEFAULT_EPS = 1e-8


__all__ = [
    "SIMILARITY_NAMES",
    "CORNER_GAMMAS",
    "Similarity",
    "PowerNormSimilarity",
    "CosineSimilarity",
    "DotSimilarity",
    "QNormSimilarity",
    "DNormSimilarity",
    "LearnableSimilarity",
    "TNSimilarity",
    "get_similarity",
    "similarity_class",
    "phi",
    "safe_norm",
    "validate_similarity_name",
    "CARRIABLE_SIMILARITY_NAMES",
    "SIMILARITY_REGISTRY",
    "SimilaritySpec",
    "similarity_spec",
    "similarity_names",
    "is_carriable",
    "gammas_of",
    "name_of_gammas",
]


def safe_norm(v: Tensor, eps: float = DEFAULT_EPS) -> Tensor:
    """L2 norm over the last dimension, clamped to ``>= eps`` (keeps dims).

    Computed in at least fp32 so half-precision inputs with large norms do not overflow.
    """
    work = v.float() if v.dtype in (torch.float16, torch.bfloat16) else v
    return torch.linalg.vector_norm(work, ord=2, dim=-1, keepdim=True).clamp_min(eps)


def phi(v: Tensor, gamma: float | Tensor, eps: float = DEFAULT_EPS) -> Tensor:
    """Per-role rescaling φ_γ(v) = v / ‖v‖^γ (paper 000 eqs. 3–7 factorised).

    ``gamma`` is a float or a 0-d tensor in [0, 1]. γ = 1 is L2 normalisation, γ = 0 the identity. ``‖v‖^γ`` is
    computed as ``exp(γ · log(max(‖v‖, eps)))`` so gradients flow into a tensor γ.
    """
    if isinstance(gamma, (int, float)):
        if gamma == 0:
            return v
        if gamma == 1:
            return (v / safe_norm(v, eps)).to(v.dtype)
    if isinstance(gamma, Tensor) and v.is_inference():
        gamma = gamma.detach()  # embeddings from encode() (inference mode) cannot join an autograd graph
    norm = safe_norm(v, eps)
    scale = torch.exp(-gamma * torch.log(norm))
    return (v * scale).to(v.dtype)


def _dot_matrix(a: Tensor, b: Tensor) -> Tensor:
    return a @ b.transpose(-1, -2)


def _check_inputs(a: Tensor, b: Tensor, pairwise: bool) -> tuple[Tensor, Tensor]:
    if not isinstance(a, Tensor):
        a = torch.as_tensor(a)
    if not isinstance(b, Tensor):
        b = torch.as_tensor(b)
    if a.dim() == 1:
        a = a.unsqueeze(0)
    if b.dim() == 1:
        b = b.unsqueeze(0)
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(f"Embedding dimensions differ: queries have {a.shape[-1]}, documents {b.shape[-1]}.")
    if pairwise and a.shape[0] != b.shape[0]:
        raise ValueError(f"Pairwise similarity needs as many queries as documents, got {a.shape[0]} and {b.shape[0]}.")
    if a.dtype != b.dtype:
        dtype = torch.promote_types(a.dtype, b.dtype)
        a, b = a.to(dtype), b.to(dtype)
    return a, b


def _abstract(sim: nn.Module, what: str) -> str:
    return (
        f"{type(sim).__name__} does not implement {what}: Similarity is the contract, not a similarity. Use a member "
        "of the family, e.g. get_similarity('qnorm') or PowerNormSimilarity(gamma_query, gamma_document)"
    )


class Similarity(nn.Module):
    """The contract every similarity of the package meets: a matrix form and a pairwise form of s(query, document).

    ``forward(Q[B, n], D[M, n]) -> [B, M]`` (usable as ``similarity_fct`` of sentence-transformers losses),
    :meth:`pairwise` ``(Q[B, n], D[B, n]) -> [B]``, :attr:`symmetric`, :attr:`requires_roles`, ``name`` and
    :meth:`get_config_dict`. Nothing about γ: only the power-norm family (:class:`PowerNormSimilarity`) has γ, so
    ask ``isinstance(sim, PowerNormSimilarity)`` (or the registry, :func:`similarity_spec`) before reading them.
    """

    name: str = "similarity"

    def __init__(self, eps: float = DEFAULT_EPS) -> None:
        super().__init__()
        if not (eps > 0 and math.isfinite(eps)):
            raise ValueError(f"eps must be a positive finite float, got {eps!r}")
        self.eps = float(eps)

    def forward(self, queries: Tensor, documents: Tensor) -> Tensor:
        """Matrix form: ``[B, n] x [M, n] -> [B, M]``; row i holds query i against every document."""
        raise NotImplementedError(_abstract(self, "forward (the matrix form)"))

    def pairwise(self, queries: Tensor, documents: Tensor) -> Tensor:
        """Pairwise form: ``[B, n] x [B, n] -> [B]``; entry i is s(q_i, d_i)."""
        raise NotImplementedError(_abstract(self, "pairwise"))

    @property
    def symmetric(self) -> bool:
        """Whether s(a, b) == s(b, a) for all a, b with the current parameters."""
        raise NotImplementedError(_abstract(self, "symmetric"))

    @property
    def requires_roles(self) -> bool:
        """True when query and document inputs must be encoded in their own roles."""
        return not self.symmetric

    def get_config_dict(self) -> dict[str, Any]:
        return {"name": self.name}

    def __repr__(self) -> str:  # used by ST's model card when rendering loss configs
        return f"{type(self).__name__}({self.extra_repr()})"


class PowerNormSimilarity(Similarity):
    """The power-norm family: s(q, d) = φ_γq(q) · φ_γd(d) = qᵀd / (‖q‖^γq ‖d‖^γd) (paper 000 eqs. 3–7).

    Built directly it has constant γ ∈ [0, 1] (``PowerNormSimilarity(0.5, 0.5)``; at a corner its ``name`` is that
    corner's, e.g. ``"qnorm"`` for (1, 0)); :class:`LearnableSimilarity` is the member whose γ are trained. Every
    member has :meth:`gammas`, ``gamma_query`` / ``gamma_document`` and the per-role rescalings
    :meth:`transform_query` / :meth:`transform_document` a model can carry.
    """

    name = "power_norm"

    def __init__(self, gamma_query: float, gamma_document: float, eps: float = DEFAULT_EPS) -> None:
        super().__init__(eps=eps)
        for label, g in (("gamma_query", gamma_query), ("gamma_document", gamma_document)):
            if not (0.0 <= float(g) <= 1.0):
                raise ValueError(f"{label} must lie in [0, 1], got {g!r}")
        self._gq = float(gamma_query)
        self._gd = float(gamma_document)
        if type(self) is PowerNormSimilarity:
            self.name = name_of_gammas(self._gq, self._gd) or PowerNormSimilarity.name

    # --- the math ---------------------------------------------------------------------------------------------
    def gammas(self) -> tuple[float | Tensor, float | Tensor]:
        """The current (γq, γd): floats for a fixed member, 0-d tensors for :class:`LearnableSimilarity`."""
        return self._gq, self._gd

    def transform_query(self, q: Tensor) -> Tensor:
        """φ_γq(q): what a model serving this similarity emits for queries."""
        return phi(q, self.gammas()[0], self.eps)

    def transform_document(self, d: Tensor) -> Tensor:
        """φ_γd(d): what a model serving this similarity emits for documents."""
        return phi(d, self.gammas()[1], self.eps)

    def forward(self, queries: Tensor, documents: Tensor) -> Tensor:
        """Matrix form: ``[B, n] x [M, n] -> [B, M]``; row i holds query i against every document."""
        queries, documents = _check_inputs(queries, documents, pairwise=False)
        return _dot_matrix(self.transform_query(queries), self.transform_document(documents))

    def pairwise(self, queries: Tensor, documents: Tensor) -> Tensor:
        """Pairwise form: ``[B, n] x [B, n] -> [B]``; entry i is s(q_i, d_i)."""
        queries, documents = _check_inputs(queries, documents, pairwise=True)
        return (self.transform_query(queries) * self.transform_document(documents)).sum(-1)

    # --- properties -----------------------------------------------------------------------------------------
    @property
    def gamma_query(self) -> float:
        g = self.gammas()[0]
        return float(g.detach()) if isinstance(g, Tensor) else float(g)

    @property
    def gamma_document(self) -> float:
        g = self.gammas()[1]
        return float(g.detach()) if isinstance(g, Tensor) else float(g)

    @property
    def symmetric(self) -> bool:
        """Whether s(a, b) == s(b, a) for all a, b (paper 000 Prop. 2.1): only when γq == γd."""
        return self.gamma_query == self.gamma_document

    def get_config_dict(self) -> dict[str, Any]:
        return {"name": self.name, "gamma_query": self.gamma_query, "gamma_document": self.gamma_document}

    def extra_repr(self) -> str:
        return f"gamma_query={self.gamma_query:.4f}, gamma_document={self.gamma_document:.4f}"


class CosineSimilarity(PowerNormSimilarity):
    """Cosine: q̂ᵀd̂ (paper 000 eq. 3). Symmetric."""

    name = "cosine"

    def __init__(self, eps: float = DEFAULT_EPS) -> None:
        super().__init__(1.0, 1.0, eps=eps)


class DotSimilarity(PowerNormSimilarity):
    """Dot product: qᵀd = ‖q‖‖d‖ cos θ (paper 000 eq. 4). Symmetric."""

    name = "dot"

    def __init__(self, eps: float = DEFAULT_EPS) -> None:
        super().__init__(0.0, 0.0, eps=eps)


class QNormSimilarity(PowerNormSimilarity):
    """Query-only normalisation: q̂ᵀd = ‖d‖ cos θ (paper 000 eq. 5). Asymmetric; ranks like dot."""

    name = "qnorm"

    def __init__(self, eps: float = DEFAULT_EPS) -> None:
        super().__init__(1.0, 0.0, eps=eps)


class DNormSimilarity(PowerNormSimilarity):
    """Document-only normalisation: qᵀd̂ = ‖q‖ cos θ (paper 000 eq. 6). Asymmetric; ranks like cosine."""

    name = "dnorm"

    def __init__(self, eps: float = DEFAULT_EPS) -> None:
        super().__init__(0.0, 1.0, eps=eps)


# ----------------------------------------------------------------------------------------------------------------
# sim_TN (L2Dir, paper 002): the InfoTN loss's similarity. Not a per-role rescaling, so a model cannot carry it.
# ----------------------------------------------------------------------------------------------------------------
class TNSimilarity(Similarity):
    """sim_TN(q, t) = 1 − ‖q − t‖ / (‖q‖ + ‖t‖) ∈ [0, 1] (L2Dir paper 002 eqs. 1 and 4).

    Depends on both direction and length: it is 1 iff q and t have the same direction *and* the same norm
    (k = ‖t‖/‖q‖ = 1 and cos γ = 1, paper App. A), and 0 iff they point in opposite directions. Symmetric.

    Numerics: computed in fp32 (fp64 inputs stay fp64) with autocast disabled, so a bf16/fp16
    ``torch.autocast`` region does not run the matmul in half precision. The matrix form uses
    ‖a − b‖² = ‖a‖² + ‖b‖² − 2a·b (no (N, M, d) tensor); that identity cancels catastrophically for near-aligned
    pairs (fp32 error ≈ 1e-7·(‖a‖² + ‖b‖²), a floor of ≈ 2e-4 in sim_TN), so every pair with
    ‖a − b‖² < ``refine_ratio``·(‖a‖² + ‖b‖²) (default 0.1: cos > 0.9 at equal norms, typically the positives) is
    recomputed from the difference a − b, as the pairwise form does (on the CPU by gathering those pairs; on an
    accelerator every pair is computed that way, in row chunks, and the near-aligned ones are selected on the device:
    an elementwise pass over B·M·n values instead of a host read; ``refine_ratio=0`` skips it).
    ``eps`` sits inside every square root —
    ‖a − b‖ = sqrt(d² + eps) and ‖a‖ = sqrt(‖a‖² + eps) — so the gradient is finite at perfect alignment (where
    L_TN is singular, paper App. A) and at zero vectors. Because (sqrt(x+eps) + sqrt(y+eps))² ≥ (‖a‖+‖b‖)² + eps,
    the eps-smoothed ratio still lies in [0, 1]; the result is clamped to [0, 1] only to absorb rounding. Two zero
    vectors score 0.5 (the paper leaves zero vectors undefined). ``sim_TN(x, x) = 1 − sqrt(eps) / (2‖x‖)``.

    It is not of the form φ_γq(q)·φ_γd(t): not a :class:`PowerNormSimilarity`, so it has no γ and no per-role
    rescaling, and a model cannot carry it (the registry says ``carriable=False``).
    """

    name = "tn"

    def __init__(self, eps: float = DEFAULT_EPS, refine_ratio: float = 0.1) -> None:
        super().__init__(eps=eps)
        if not (isinstance(refine_ratio, (int, float)) and 0.0 <= float(refine_ratio) <= 1.0):
            raise ValueError(f"refine_ratio must be a number in [0, 1], got {refine_ratio!r}")
        self.refine_ratio = float(refine_ratio)

    def forward(self, queries: Tensor, documents: Tensor) -> Tensor:
        """Matrix form ``[B, n] x [M, n] -> [B, M]`` (fp32), without building a ``[B, M, n]`` tensor."""
        queries, documents = _check_inputs(queries, documents, pairwise=False)
        with torch.autocast(device_type=queries.device.type, enabled=False):
            a, b = _at_least_fp32(queries), _at_least_fp32(documents)
            sq_a = (a * a).sum(-1, keepdim=True)  # [B, 1]
            sq_b = (b * b).sum(-1).unsqueeze(0)  # [1, M]
            # ‖a − b‖², law of cosines (eq. 2)
            sq_dist = (sq_a + sq_b - 2.0 * (a @ b.transpose(-1, -2))).clamp_min(0.0)
            sq_dist = self._refine_near_aligned(sq_dist, a, b, sq_a + sq_b)
            return self._from_parts(sq_dist, sq_a, sq_b)

    def _refine_near_aligned(self, sq_dist: Tensor, a: Tensor, b: Tensor, sq_sum: Tensor) -> Tensor:
        """Recompute ‖a_i − b_j‖² from the difference where the identity loses its digits (see class docstring).

        Two ways, the same values: on the CPU only the near-aligned pairs are gathered (a ``nonzero``, which costs
        nothing there: no device to wait for); on an accelerator every pair is recomputed in row chunks
        (:func:`~st_magnitude._exact_sq_dist.exact_sq_dist`) and the near-aligned ones are selected with
        ``torch.where``, so no shape depends on the data and nothing waits for the device (an elementwise pass
        over B·M·n values: far more work than the gather, which is why the CPU gathers);
        :mod:`st_magnitude._cpu_shortcuts` switches the CPU's way off."""
        if self.refine_ratio == 0.0 or a.dim() != 2 or b.dim() != 2 or sq_dist.numel() == 0:
            return sq_dist
        with torch.no_grad():
            near = sq_dist < self.refine_ratio * sq_sum
        if not takes_cpu_shortcut(sq_dist):
            return torch.where(near, exact_sq_dist(a, b), sq_dist)
        rows, cols = torch.nonzero(near, as_tuple=True)
        if rows.numel() == 0:
            return sq_dist
        chunk = max(1, (1 << 22) // max(1, a.shape[-1]))  # at most ~4M gathered elements at a time
        parts = []
        for start in range(0, rows.numel(), chunk):
            diff = a[rows[start : start + chunk]] - b[cols[start : start + chunk]]
            parts.append((diff * diff).sum(-1))
        return sq_dist.index_put((rows, cols), torch.cat(parts))

    def pairwise(self, queries: Tensor, documents: Tensor) -> Tensor:
        """Pairwise form ``[B, n] x [B, n] -> [B]`` (fp32); ‖a − b‖ from the difference itself."""
        queries, documents = _check_inputs(queries, documents, pairwise=True)
        with torch.autocast(device_type=queries.device.type, enabled=False):
            a, b = _at_least_fp32(queries), _at_least_fp32(documents)
            diff = a - b
            return self._from_parts((diff * diff).sum(-1), (a * a).sum(-1), (b * b).sum(-1))

    def _from_parts(self, sq_dist: Tensor, sq_a: Tensor, sq_b: Tensor) -> Tensor:
        eps = self.eps
        dist = torch.sqrt(sq_dist + eps)
        denom = torch.sqrt(sq_a + eps) + torch.sqrt(sq_b + eps)
        return (1.0 - dist / denom).clamp(0.0, 1.0)  # eq. 4: sim_TN = 1 − L_TN

    @property
    def symmetric(self) -> bool:
        return True

    def get_config_dict(self) -> dict[str, Any]:
        return {"name": self.name, "eps": self.eps, "refine_ratio": self.refine_ratio}

    def extra_repr(self) -> str:
        return f"eps={self.eps:g}, refine_ratio={self.refine_ratio:g}"


def _at_least_fp32(v: Tensor) -> Tensor:
    return v if v.dtype == torch.float64 else v.float()


class LearnableSimilarity(PowerNormSimilarity):
    """Learnable normalisation: qᵀd / (‖q‖^γq ‖d‖^γd), γ = sigmoid(γ̂) (paper 000 eq. 7).

    Two unconstrained scalars γ̂q, γ̂d, initialised so that γ = ``init_gamma`` (paper: 0.5, i.e. γ̂ = 0).
    ∂s/∂γq = −ln‖q‖·s and ∂s/∂γd = −ln‖d‖·s (paper eqs. 38–39) follow from autograd.

    Args:
        init_gamma: initial γ for both sides, or a ``(γq, γd)`` pair; each in the open interval (0, 1).
        eps: norm floor.
        source: optional module holding ``gamma_query_logit`` / ``gamma_document_logit`` parameters (e.g. the
            model's :class:`~st_magnitude.modules.RoleNormalize`); the similarity then shares those parameters
            instead of owning its own, so training it trains the model's γ̂.
    """

    name = "learnable"

    def __init__(
        self,
        init_gamma: float | tuple[float, float] = 0.5,
        eps: float = DEFAULT_EPS,
        source: nn.Module | None = None,
    ) -> None:
        if source is not None:
            if not (hasattr(source, "gamma_query_logit") and hasattr(source, "gamma_document_logit")):
                raise ValueError("source must hold `gamma_query_logit` and `gamma_document_logit` parameters")
            gq, gd = (
                float(torch.sigmoid(p.detach())) for p in (source.gamma_query_logit, source.gamma_document_logit)
            )
        else:
            gq, gd = (init_gamma, init_gamma) if isinstance(init_gamma, (int, float)) else init_gamma
            for label, g in (("gamma_query", gq), ("gamma_document", gd)):
                if not (0.0 < float(g) < 1.0):
                    raise ValueError(f"initial {label} must lie in the open interval (0, 1), got {g!r}")
        super().__init__(gq, gd, eps=eps)  # the initial γ; gammas() below reads the trained γ̂
        # `source` is stored in a list so its parameters are not registered twice (they belong to it)
        self._source = [source] if source is not None else None
        if source is None:
            self.gamma_query_logit = nn.Parameter(torch.tensor(_logit(float(gq))))
            self.gamma_document_logit = nn.Parameter(torch.tensor(_logit(float(gd))))

    def _logits(self) -> tuple[Tensor, Tensor]:
        holder = self._source[0] if self._source is not None else self
        return holder.gamma_query_logit, holder.gamma_document_logit

    def gammas(self) -> tuple[Tensor, Tensor]:
        lq, ld = self._logits()
        return torch.sigmoid(lq), torch.sigmoid(ld)

    def transform_query(self, q: Tensor) -> Tensor:
        return phi(q, self.gammas()[0].to(q.device), self.eps)

    def transform_document(self, d: Tensor) -> Tensor:
        return phi(d, self.gammas()[1].to(d.device), self.eps)

    @property
    def symmetric(self) -> bool:
        lq, ld = self._logits()
        return bool(torch.equal(lq.detach(), ld.detach()))


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


_CLASSES: dict[str, type[Similarity]] = {
    "cosine": CosineSimilarity,
    "dot": DotSimilarity,
    "qnorm": QNormSimilarity,
    "dnorm": DNormSimilarity,
    "learnable": LearnableSimilarity,
    "tn": TNSimilarity,
}
# the registry (names and capabilities) lives in the torch-free st_magnitude._similarity_names; the classes here
assert tuple(_CLASSES) == SIMILARITY_NAMES
assert all(issubclass(c, PowerNormSimilarity) == SIMILARITY_REGISTRY[n].power_norm for n, c in _CLASSES.items())


def similarity_class(name: str) -> type[Similarity]:
    """The class registered under a name or alias (``"qnorm"`` → :class:`QNormSimilarity`); unknown names raise."""
    return _CLASSES[validate_similarity_name(name)]


def get_similarity(name: str | Similarity, **kwargs: Any) -> Similarity:
    """Look a similarity up by name: one of ``cosine``, ``dot``, ``qnorm``, ``dnorm``, ``learnable``, ``tn``.

    A :class:`Similarity` instance is returned unchanged. Keyword arguments go to the class (``eps`` for all,
    ``init_gamma`` / ``source`` for ``learnable``, ``refine_ratio`` for ``tn``); any other keyword, or an unknown
    name, raises ``ValueError`` listing the valid ones.

    Example::

        from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
        loss = MultipleNegativesRankingLoss(model, similarity_fct=get_similarity("qnorm"))
    """
    if isinstance(name, Similarity):
        if kwargs:
            raise ValueError("keyword arguments are only accepted together with a similarity name")
        return name
    key = validate_similarity_name(name)
    cls = _CLASSES[key]
    allowed = sorted(p for p in inspect.signature(cls.__init__).parameters if p != "self")
    unknown = set(kwargs) - set(allowed)
    if unknown:
        listed = ", ".join(f"`{k}`" for k in allowed[:-1]) + (" and " if len(allowed) > 1 else "") + f"`{allowed[-1]}`"
        raise ValueError(f"similarity {key!r} accepts only {listed}, got {sorted(unknown)}")
    return cls(**kwargs)
