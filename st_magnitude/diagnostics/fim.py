"""Fisher-information diagnostics of paper 000 (§4.1 Table 2, §4.5 Table 3, App. M).

1. **Component FIM** (Table 2): the mean squared derivative of the similarity s with respect to the document
   magnitude, the query magnitude and the angle, from the analytic partials of paper 000 eqs. 11–25. Writing
   s = ‖q‖^(1−γq) ‖d‖^(1−γd) cos θ (learnable form, eq. 7; the corners are its special cases)::

       ∂s/∂‖d‖ = (1−γd) ‖q‖^(1−γq) ‖d‖^(−γd) cos θ        I_‖d‖ = E[(∂s/∂‖d‖)²]
       ∂s/∂‖q‖ = (1−γq) ‖q‖^(−γq) ‖d‖^(1−γd) cos θ        I_‖q‖ = E[(∂s/∂‖q‖)²]
       ∂s/∂θ   = −‖q‖^(1−γq) ‖d‖^(1−γd) sin θ             I_θ   = E[(∂s/∂θ)²]

   Reported as log10 with exact zeros floored at 1e-20 (the paper prints −20.0). Paper 000 Table 2 evaluates each
   column on a model *trained* with that similarity (App. M.3); :func:`component_fim_table` applies every column's
   formula to one model's embeddings, a single-model sensitivity profile that matches Table 2 only in the column of
   the similarity the model was trained with.

2. **Condition-number rule** (Table 3, eq. 26): ``argmin_{s ∈ {qnorm, dnorm}} κ(F_s)`` on the *pretrained* model.
   The paper leaves the matrix unspecified; our reproducible recipe: per-pair
   gradients of s w.r.t. the concatenated embedding [q; d] ∈ R^{2n} (Lemma M.1/M.2)::

       qnorm:  ∂s/∂q = P⊥q d / ‖q‖,  ∂s/∂d = q̂          (P⊥q = I − q̂q̂ᵀ)
       dnorm:  ∂s/∂q = d̂,            ∂s/∂d = P⊥d q / ‖d‖

   F = (1/N) Σ g_i g_iᵀ, κ = λ_max / λ_min over eigenvalues above ``rtol · λ_max`` (the radial direction of the
   normalised side is a structural zero, Theorem M.3).

3. **Enough pairs** (our choice; the paper gives no sample size for Table 3). F is 2n × 2n, so below N = 2n pairs it
   is singular and only damping makes κ finite — both sides then read log10 κ ≈ 6 and Δ's sign is noise. Just
   above 2n, λ_min is pulled towards 0 by sampling error (Marchenko–Pastur) and Δ still flips sign between seeds.
   On all-MiniLM-L6-v2 with NFCorpus train pairs (docs/diagnostics.md) Δ's sign agreed over seeds from N ≈ 4n
   on, so no κ estimate (the full one or a resampling replicate) is computed from fewer than
   :data:`KAPPA_REPLICATE_PAIRS_PER_DIM` · n = 4n pairs. The interval comes from half-sampling without replacement
   (the delete-N/2 jackknife): each replicate is a κ of ⌊N/2⌋ *distinct* pairs (a bootstrap with replacement holds
   only ≈ 0.63·N distinct pairs, so at N = 800, n = 384 every bootstrap replicate was below 2n and measured the
   damping). A half-sample's Δ has the full-N estimate's first-order variance (finite population correction
   1 − m/N = 1/2), so the interval is Δ_N + [q_α − mean, q_(1−α) − mean] of the replicate Δs, unscaled: centred on
   Δ_N because κ is biased at finite N (sampling error pulls λ_min down, more at N/2 than at N) and the replicates
   share that larger bias. It is a *sampling* interval (what another N pairs from the same pool would give); the
   finite-N bias itself is what the minimum budget controls. Hence the minimum pair budget
   :func:`kappa_min_pairs` = :data:`KAPPA_MIN_PAIRS_PER_DIM` · n = 8n (half-samples of ≥ 4n pairs), which is also
   the default budget. The verdict is "confident" only when N ≥ 8n and the interval excludes 0 on the side of Δ;
   otherwise it is "inconclusive" with the reason, and no side is recommended.
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

#: floor for log10 of exact zeros (paper 000 Table 2 prints −20.0)
FIM_FLOOR = 1e-20

#: fewest pairs per embedding dimension n that any κ estimate (full or replicate) is computed from: 4n, twice the
#: 2n rows of F (Δ's sign agreed across seeds from ≈ 4n on, all-MiniLM-L6-v2 + NFCorpus; docs/diagnostics.md)
KAPPA_REPLICATE_PAIRS_PER_DIM = 4
#: minimum pair budget per dimension for a verdict: 8n, so the half-sample replicates hold ≥ 4n distinct pairs
KAPPA_MIN_PAIRS_PER_DIM = 2 * KAPPA_REPLICATE_PAIRS_PER_DIM


def kappa_min_pairs(dim: int) -> int:
    """Minimum (and default) number of (query, positive) pairs for a κ verdict at embedding dim n: 8n."""
    if dim < 1:
        raise ValueError(f"the embedding dimension must be positive, got {dim}")
    return KAPPA_MIN_PAIRS_PER_DIM * int(dim)


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
    """Every similarity's component FIMs at one model's embeddings: ``{variant: {"doc_mag", "query_mag", "angular"}}``.

    Not paper 000 Table 2 (whose columns come from different trained models, one per similarity): all columns here
    use the same ``q``, ``d``. For Table 2 itself call :func:`component_fim` on each trained model with its own γ.

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
    """Outcome of :func:`recommend_normalization` (log10 κ values, half-sampling interval of their difference).

    ``recommendation`` is ``"qnorm"``/``"dnorm"`` only when ``verdict == "confident"``; otherwise it is
    ``"inconclusive"`` and ``reason`` says why (too few pairs, no interval, or the interval contains 0).
    ``ci_low``/``ci_high`` are ``None`` when no well-posed interval could be formed.
    """

    log10_kappa_qnorm: float
    log10_kappa_dnorm: float
    delta: float  # log10 κ(qnorm) − log10 κ(dnorm); < 0 → qnorm
    ci_low: float | None
    ci_high: float | None
    recommendation: str  # "qnorm", "dnorm" or "inconclusive"
    confident: bool  # verdict == "confident"
    n_pairs: int
    dim: int
    rank_qnorm: int
    rank_dnorm: int
    n_resamples: int  # half-sample replicates actually drawn (0: no interval)
    confidence: float
    damping: float
    min_pairs: int  # minimum pair budget for a verdict (8n by default)
    subsample_size: int  # pairs per half-sample replicate (⌊N/2⌋), 0 when no replicates were drawn
    verdict: str  # "confident" or "inconclusive"
    reason: str  # why the verdict is inconclusive ("" when confident)
    replicate_deltas: list[float] = field(default_factory=list, repr=False)

    @property
    def lean(self) -> str:
        """The side Δ's sign points to, whatever the verdict (do not act on it when inconclusive)."""
        return "qnorm" if self.delta < 0 else "dnorm"

    def summary(self) -> str:
        if self.n_pairs < self.min_pairs:  # κ of so few pairs says nothing (below 2n it is the damping's number)
            return (
                f"inconclusive, no recommendation: the κ rule needs >= {self.min_pairs} (query, relevant document) "
                f"pairs ({self.min_pairs / self.dim:g}n for n = {self.dim} dimensions); got {self.n_pairs}. Ask for "
                "more pairs (n_pairs: diagnose --n-pairs, compare --kappa-pairs) from data with more judged pairs "
                "(another --pairs-split, or more datasets)"
            )
        interval = (
            f"{int(self.confidence * 100)}% half-sampling CI [{self.ci_low:+.4f}, {self.ci_high:+.4f}] "
            f"({self.n_resamples} × {self.subsample_size} pairs)"
            if self.ci_low is not None
            else "no interval"
        )
        head = (
            f"recommend {self.recommendation} (confident)"
            if self.confident
            else f"inconclusive, no recommendation ({self.reason})"
        )
        return (
            f"{head}: log10 κ qnorm {self.log10_kappa_qnorm:.4f} vs dnorm {self.log10_kappa_dnorm:.4f}; "
            f"Δ = {self.delta:+.4f}, {interval}; N={self.n_pairs} pairs, n={self.dim}, minimum {self.min_pairs}"
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
    min_pairs: int | None = None,
    show_progress_bar: bool = False,
) -> ConditionNumberResult:
    """κ(F_qnorm) vs κ(F_dnorm) on raw pretrained (query, positive) embeddings → which side to normalise.

    Args:
        q, d: ``[N, n]`` raw embeddings of N (query, relevant document) pairs of a *pretrained* model.
        n_bootstrap: number of resampling replicates for the interval (historic name: they are half-samples
            *without* replacement, module docs §3); 0 disables the interval (the verdict is then inconclusive).
        confidence: interval level.
        rtol: relative eigenvalue tolerance (drops structural zeros).
        damping: δ added as δ·λ_max·I to the full-sample F. ``None``: 0 when N ≥ 2n, else 1e-6 (only to report a
            finite κ; such an N is far below the minimum and the verdict is inconclusive).
        seed: resampling seed.
        min_pairs: minimum pair budget for a verdict (default :func:`kappa_min_pairs` = 8n); must be ≥ 4n, the
            fewest pairs a replicate may hold, times 2.
        show_progress_bar: a tqdm bar over the replicates (two eigendecompositions of an ``[2n, 2n]`` matrix each:
            minutes for n = 384 on a loaded CPU).
    """
    if q.shape != d.shape or q.dim() != 2:
        raise ValueError(f"q and d must both be [N, n] pair matrices, got {tuple(q.shape)} and {tuple(d.shape)}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n_bootstrap < 0:
        raise ValueError(f"n_bootstrap (number of half-sample replicates) must be >= 0, got {n_bootstrap}")
    n_pairs, dim = q.shape
    if n_pairs < 2:
        raise ValueError("need at least 2 pairs")
    floor = kappa_min_pairs(dim)
    if min_pairs is None:
        min_pairs = floor
    elif min_pairs < floor:
        raise ValueError(
            f"min_pairs must be >= {KAPPA_MIN_PAIRS_PER_DIM}n = {floor} for n = {dim} (half-samples of >= "
            f"{KAPPA_REPLICATE_PAIRS_PER_DIM}n pairs), got {min_pairs}"
        )
    if damping is None:
        damping = 0.0
        if n_pairs < 2 * dim:
            damping = 1e-6
            logger.warning(
                "Only %d pairs for a %d-dim [q; d] Fisher matrix (< 2n): F is rank-deficient, damping 1e-6·λ_max is "
                "added and the verdict is inconclusive; use >= %d pairs (8n).",
                n_pairs,
                2 * dim,
                min_pairs,
            )
    grads = {v: pair_gradients(q, d, v) for v in ("qnorm", "dnorm")}
    kq, rq = condition_number(fisher_matrix(grads["qnorm"]), rtol, damping)
    kd, rd = condition_number(fisher_matrix(grads["dnorm"]), rtol, damping)
    delta = math.log10(kq) - math.log10(kd)
    deltas: list[float] = []
    m = n_pairs // 2
    enough = n_pairs >= min_pairs
    if enough and n_bootstrap > 0:
        if n_bootstrap < 40:
            logger.warning(
                "κ rule: a %d%% interval from %d replicates is coarse (its tail quantiles are interpolated between "
                "the extreme replicates); use >= 100 (diagnose's default).",
                int(confidence * 100),
                n_bootstrap,
            )
        from tqdm.auto import tqdm

        gen = torch.Generator().manual_seed(seed)
        for _ in tqdm(range(n_bootstrap), desc="κ half-samples", unit="replicate", disable=not show_progress_bar):
            idx = torch.randperm(n_pairs, generator=gen)[:m]  # ⌊N/2⌋ distinct pairs, each ≥ 4n
            bq, _ = condition_number(fisher_matrix(grads["qnorm"][idx]), rtol, damping)
            bd, _ = condition_number(fisher_matrix(grads["dnorm"][idx]), rtol, damping)
            deltas.append(math.log10(bq) - math.log10(bd))
    lo = hi = None
    if deltas:  # centred on the full-sample Δ: the spread of the half-samples, not their (smaller-N) bias
        alpha = (1 - confidence) / 2
        centre = float(np.mean(deltas))
        lo, hi = (delta + float(x) - centre for x in np.quantile(deltas, [alpha, 1 - alpha]))
    if not enough:
        reason = f"N = {n_pairs} pairs is below the minimum {min_pairs} = {min_pairs / dim:g}n"
        if n_bootstrap > 0:
            logger.warning(
                "κ rule: %s; the verdict is inconclusive (half-samples of N/2 pairs must hold >= %dn).",
                reason,
                KAPPA_REPLICATE_PAIRS_PER_DIM,
            )
    elif not deltas:
        reason = "no interval (n_bootstrap = 0)"
    elif lo <= 0 <= hi:
        reason = "the interval contains 0"
    elif (delta < 0) != (hi < 0):
        reason = "the interval and the full-sample Δ disagree in sign"
    else:
        reason = ""
    confident = reason == ""
    return ConditionNumberResult(
        log10_kappa_qnorm=math.log10(kq),
        log10_kappa_dnorm=math.log10(kd),
        delta=delta,
        ci_low=lo,
        ci_high=hi,
        recommendation=("qnorm" if delta < 0 else "dnorm") if confident else "inconclusive",
        confident=confident,
        n_pairs=n_pairs,
        dim=dim,
        rank_qnorm=rq,
        rank_dnorm=rd,
        n_resamples=len(deltas),
        confidence=confidence,
        damping=damping,
        min_pairs=min_pairs,
        subsample_size=m if deltas else 0,
        verdict="confident" if confident else "inconclusive",
        reason=reason,
        replicate_deltas=deltas,
    )
