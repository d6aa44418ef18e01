"""Fisher-information diagnostics of paper 000 (§4.1 Table 2, §4.5 Table 3, App. M; digest 000 §5).

1. **Component FIM** (Table 2): the mean squared derivative of the similarity s with respect to the document
   magnitude, the query magnitude and the angle, from the analytic partials of paper 000 eqs. 11–25. Writing
   s = ‖q‖^(1−γq) ‖d‖^(1−γd) cos θ (learnable form, eq. 7; the corners are its special cases)::

       ∂s/∂‖d‖ = (1−γd) ‖q‖^(1−γq) ‖d‖^(−γd) cos θ        I_‖d‖ = E[(∂s/∂‖d‖)²]
       ∂s/∂‖q‖ = (1−γq) ‖q‖^(−γq) ‖d‖^(1−γd) cos θ        I_‖q‖ = E[(∂s/∂‖q‖)²]
       ∂s/∂θ   = −‖q‖^(1−γq) ‖d‖^(1−γd) sin θ             I_θ   = E[(∂s/∂θ)²]

   Reported as log10 with exact zeros floored at 1e-20 (the paper prints −20.0).

2. **Condition-number rule** (Table 3, eq. 26): ``argmin_{s ∈ {qnorm, dnorm}} κ(F_s)`` on the *pretrained* model.
   The paper leaves the matrix unspecified (digest §5.2); we follow the digest's reproducible recipe: per-pair
   gradients of s w.r.t. the concatenated embedding [q; d] ∈ R^{2n} (Lemma M.1/M.2)::

       qnorm:  ∂s/∂q = P⊥q d / ‖q‖,  ∂s/∂d = q̂          (P⊥q = I − q̂q̂ᵀ)
       dnorm:  ∂s/∂q = d̂,            ∂s/∂d = P⊥d q / ‖d‖

   F = (1/N) Σ g_i g_iᵀ, κ = λ_max / λ_min over eigenvalues above ``rtol · λ_max`` (the radial direction of the
   normalised side is a structural zero, Theorem M.3), N ≥ 2n pairs (else F is rank-deficient; ``damping`` adds
   δ·λ_max·I instead), and a bootstrap percentile interval for Δ = log10 κ(qnorm) − log10 κ(dnorm).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from st_magnitude.similarity import CORNER_GAMMAS, safe_norm

logger = logging.getLogger(__name__)

__all__ = [
    "FIM_FLOOR",
    "ConditionNumberResult",
    "component_fim",
    "component_fim_table",
    "condition_number",
    "fisher_matrix",
    "pair_gradients",
    "recommend_normalization",
]

#: floor for log10 of exact zeros (paper 000 Table 2 prints −20.0)
FIM_FLOOR = 1e-20


def _polar(q: Tensor, d: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    q, d = q.double(), d.double()
    nq, nd = safe_norm(q, 1e-12).squeeze(-1), safe_norm(d, 1e-12).squeeze(-1)
    cos = ((q * d).sum(-1) / (nq * nd)).clamp(-1.0, 1.0)
    sin = torch.sqrt((1.0 - cos**2).clamp_min(0.0))
    return nq, nd, cos, sin


def component_fim(q: Tensor, d: Tensor, gamma_query: float, gamma_document: float) -> dict[str, float]:
    """Component FIMs (paper 000 Table 2) of s_γ on pairs (q_i, d_i): ``{"doc_mag", "query_mag", "angular"}``.

    Values are E[(∂s/∂·)²] (not log10). Raw (unnormalised) embeddings are expected.
    """
    if q.shape != d.shape or q.dim() != 2:
        raise ValueError(f"q and d must both be [N, n] pair matrices, got {tuple(q.shape)} and {tuple(d.shape)}")
    gq, gd = float(gamma_query), float(gamma_document)
    for label, g in (("gamma_query", gq), ("gamma_document", gd)):
        if not 0.0 <= g <= 1.0:
            raise ValueError(f"{label} must lie in [0, 1], got {g}")
    nq, nd, cos, sin = _polar(q, d)
    d_mag = (1 - gd) * nq ** (1 - gq) * nd ** (-gd) * cos  # eqs. 11-25, ∂s/∂‖d‖
    q_mag = (1 - gq) * nq ** (-gq) * nd ** (1 - gd) * cos  # ∂s/∂‖q‖
    ang = -(nq ** (1 - gq)) * nd ** (1 - gd) * sin  # ∂s/∂θ
    return {
        "doc_mag": float((d_mag**2).mean()),
        "query_mag": float((q_mag**2).mean()),
        "angular": float((ang**2).mean()),
    }


def component_fim_table(
    q: Tensor, d: Tensor, learnable_gammas: tuple[float, float] = (0.5, 0.5), log10: bool = True
) -> dict[str, dict[str, float]]:
    """Table 2 for one model: ``{variant: {"doc_mag", "query_mag", "angular"}}`` for cos/dot/qnorm/dnorm/learnable.

    ``learnable_gammas`` are (γq, γd) of the learnable column (the model's learned values, or the 0.5 init).
    With ``log10`` the values are log10(max(v, 1e-20)).
    """
    variants = {**CORNER_GAMMAS, "learnable": tuple(learnable_gammas)}
    out = {}
    for name, (gq, gd) in variants.items():
        vals = component_fim(q, d, gq, gd)
        out[name] = {k: math.log10(max(v, FIM_FLOOR)) for k, v in vals.items()} if log10 else vals
    return out


def pair_gradients(q: Tensor, d: Tensor, variant: str) -> Tensor:
    """Per-pair gradient of s w.r.t. [q; d] (Lemma M.1/M.2): ``[N, 2n]`` float64."""
    q, d = q.double(), d.double()
    nq, nd = safe_norm(q, 1e-12), safe_norm(d, 1e-12)
    qh, dh = q / nq, d / nd
    if variant == "qnorm":
        # s = q̂ᵀd: ∂s/∂q = (d − (q̂ᵀd) q̂)/‖q‖ = P⊥q d/‖q‖, ∂s/∂d = q̂
        gq = (d - (qh * d).sum(-1, keepdim=True) * qh) / nq
        gd = qh
    elif variant == "dnorm":
        # s = qᵀd̂: ∂s/∂q = d̂, ∂s/∂d = P⊥d q/‖d‖
        gq = dh
        gd = (q - (dh * q).sum(-1, keepdim=True) * dh) / nd
    else:
        raise ValueError(
            f"variant must be 'qnorm' or 'dnorm' (the comparable pair, paper 000 Prop. M.4), got {variant!r}"
        )
    return torch.cat([gq, gd], dim=-1)


def fisher_matrix(grads: Tensor, weights: Tensor | None = None) -> Tensor:
    """F = Σ w_i g_i g_iᵀ / Σ w_i (w = 1: the plain mean)."""
    if weights is None:
        return grads.T @ grads / grads.shape[0]
    w = weights.to(grads.dtype)
    return (grads * w[:, None]).T @ grads / w.sum()


def condition_number(fisher: Tensor, rtol: float = 1e-10, damping: float = 0.0) -> tuple[float, int]:
    """κ = λ_max/λ_min over eigenvalues > ``rtol``·λ_max (after adding ``damping``·λ_max·I); returns (κ, rank used)."""
    if not (rtol > 0 and damping >= 0):
        raise ValueError(f"rtol must be > 0 and damping >= 0, got {rtol}, {damping}")
    ev = torch.linalg.eigvalsh(fisher.double())
    lmax = float(ev[-1])
    if not lmax > 0:
        raise ValueError("The Fisher matrix is zero: all pair gradients vanish (constant or empty embeddings?).")
    if damping:
        ev = ev + damping * lmax
    kept = ev[ev > rtol * lmax]
    return float(kept[-1] / kept[0]), int(kept.numel())


@dataclass
class ConditionNumberResult:
    """Outcome of :func:`recommend_normalization` (log10 κ values, bootstrap interval of their difference)."""

    log10_kappa_qnorm: float
    log10_kappa_dnorm: float
    delta: float  # log10 κ(qnorm) − log10 κ(dnorm); < 0 → qnorm
    ci_low: float
    ci_high: float
    recommendation: str  # "qnorm" or "dnorm"
    confident: bool  # the interval excludes 0
    n_pairs: int
    dim: int
    rank_qnorm: int
    rank_dnorm: int
    n_bootstrap: int
    confidence: float
    damping: float
    bootstrap_deltas: list[float] = field(default_factory=list, repr=False)

    def summary(self) -> str:
        verdict = "confident" if self.confident else "inconclusive: the interval contains 0"
        return (
            f"recommend {self.recommendation} (log10 κ qnorm {self.log10_kappa_qnorm:.4f} vs dnorm "
            f"{self.log10_kappa_dnorm:.4f}; Δ = {self.delta:+.4f}, {int(self.confidence * 100)}% bootstrap CI "
            f"[{self.ci_low:+.4f}, {self.ci_high:+.4f}], {verdict}; N={self.n_pairs} pairs, n={self.dim})"
        )


def recommend_normalization(
    q: Tensor,
    d: Tensor,
    *,
    n_bootstrap: int = 200,
    confidence: float = 0.95,
    rtol: float = 1e-10,
    damping: float | None = None,
    seed: int = 0,
) -> ConditionNumberResult:
    """κ(F_qnorm) vs κ(F_dnorm) on raw pretrained (query, positive) embeddings → which side to normalise.

    Args:
        q, d: ``[N, n]`` raw embeddings of N (query, relevant document) pairs of a *pretrained* model.
        n_bootstrap: bootstrap resamples of the pairs (multinomial weights; 0 disables the interval).
        confidence: interval level.
        rtol: relative eigenvalue tolerance (drops structural zeros).
        damping: δ added as δ·λ_max·I. ``None``: 0 when N ≥ 2n, else 1e-6 with a warning in the log.
        seed: bootstrap seed.
    """
    if q.shape != d.shape or q.dim() != 2:
        raise ValueError(f"q and d must both be [N, n] pair matrices, got {tuple(q.shape)} and {tuple(d.shape)}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    n_pairs, dim = q.shape
    if n_pairs < 2:
        raise ValueError("need at least 2 pairs")
    if damping is None:
        damping = 0.0
        if n_pairs < 2 * dim:
            damping = 1e-6
            logger.warning(
                "Only %d pairs for a %d-dim [q; d] Fisher matrix (need >= 2n = %d): F is rank-deficient, so "
                "damping 1e-6·λ_max is added (digest 000 §5.2). Use more pairs for an undamped κ.",
                n_pairs,
                2 * dim,
                2 * dim,
            )
    grads = {v: pair_gradients(q, d, v) for v in ("qnorm", "dnorm")}
    kq, rq = condition_number(fisher_matrix(grads["qnorm"]), rtol, damping)
    kd, rd = condition_number(fisher_matrix(grads["dnorm"]), rtol, damping)
    delta = math.log10(kq) - math.log10(kd)
    deltas: list[float] = []
    gen = torch.Generator().manual_seed(seed)
    for _ in range(n_bootstrap):
        w = torch.bincount(torch.randint(0, n_pairs, (n_pairs,), generator=gen), minlength=n_pairs).double()
        bq, _ = condition_number(fisher_matrix(grads["qnorm"], w), rtol, damping)
        bd, _ = condition_number(fisher_matrix(grads["dnorm"], w), rtol, damping)
        deltas.append(math.log10(bq) - math.log10(bd))
    if deltas:
        alpha = (1 - confidence) / 2
        lo, hi = (float(x) for x in np.quantile(deltas, [alpha, 1 - alpha]))
    else:
        lo = hi = delta
    return ConditionNumberResult(
        log10_kappa_qnorm=math.log10(kq),
        log10_kappa_dnorm=math.log10(kd),
        delta=delta,
        ci_low=lo,
        ci_high=hi,
        recommendation="qnorm" if delta < 0 else "dnorm",
        confident=bool(deltas) and (hi < 0 or lo > 0),
        n_pairs=n_pairs,
        dim=dim,
        rank_qnorm=rq,
        rank_dnorm=rd,
        n_bootstrap=n_bootstrap,
        confidence=confidence,
        damping=damping,
        bootstrap_deltas=deltas,
    )
