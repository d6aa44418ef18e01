"""MW's pairs far from the grid: Σ softplus((n − p)/τ) from sorted positives, in O(log B) work per score.

Scores outside the grid's window (:mod:`._mw_grid`) are compared with every positive by splitting the positives,
sorted, into three runs around each score ``n`` (``z = (n − p)/τ``):

* **linear side** (``p ≤ n − Tτ``, z ≥ T): ``softplus(z) = z + Σ_{k≤K} (−1)^{k+1} e^{−kz}/k`` (truncation below
  ``e^{−(K+1)T}/(K+1)`` relative): the linear part is ``(c·(n − p_{c−1}) + S_{c−1})/τ`` with ``S_c = Σ_{j≤c}
  (p_c − p_j)`` a cumulative sum of non-negative gaps (no cancellation whatever the scores' magnitude), and each
  exponential is factorised, ``Σ_{j<c} e^{−k(n − p_j)/τ} = e^{−k(n − p_{c−1})/τ}·Σ_{j<c} e^{−k(p_{c−1} − p_j)/τ}``;
* **exponential side** (``p ≥ n + Tτ``, z ≤ −T): ``softplus(z) = Σ_{k≤K} (−1)^{k+1} e^{kz}/k``, factorised the
  same way around the first positive of the run;
* **near run** (the rest, within about 3Tτ of n): evaluated pair by pair.

The factorised sums ``Σ_{j≤c} e^{−k(p_c − p_j)/τ}`` (and their mirror) are log-cumulative sums over *local* gaps
(each gap capped at :data:`GAP_CAP` τ, beyond which every term underflows anyway), so they stay relative-accurate
for scores of any magnitude. The gradients are the same sums' derivatives: ``∂/∂n`` per score from the same
gathers; ``∂/∂p_j`` from per-slot deposits of the scores' factors, carried along the sorted positives by the same
log-cumulative sums, and a count of the scores on each side.

The runs are found without a search per score: the score line is cut into power-of-two buckets (exact bucket
numbers and edges at any magnitude), each bucket's cuts are searched once, and a score's run is its bucket's, so
the near run may hold a few positives of the sides (still exact, merely evaluated directly). Cuts are rounded so a
positive is only ever put on a side when it truly lies ≥ Tτ away.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["SERIES_TERMS", "TAIL_Z", "Tails"]

#: exponential terms K of each side's series, and the distance T (in τ) beyond which a pair is summed by them: the
#: first neglected term, e^{−(K+1)T}/(K+1) ≈ 2e-14, is relative to the pair's value on both sides (and absolute
#: for σ, the gradient)
SERIES_TERMS = 3
TAIL_Z = 7.5
#: gaps between sorted positives are capped at this many τ in the log-cumulative sums: e^{−745} is float64's
#: smallest subnormal, so every term across a larger gap is zero in float64 anyway
GAP_CAP = 750.0
#: the most buckets (their cuts are searched once each)
MAX_BUCKETS = 2**16
#: near pairs evaluated per pass
PAIR_CHUNK = 2**20


def _pow2_at_least(x: float) -> float:
    return 2.0 ** math.ceil(math.log2(x))


class Tails:
    """The sorted positives' prefix structures and the buckets over ``[lo, hi]`` (the scores' range), built once per
    grid plan; :meth:`pair_sums` then sums any scores in the range against every positive."""

    def __init__(self, positives: Tensor, inv_tau: float, lo: float, hi: float) -> None:
        pos = positives.detach().to(torch.float64).reshape(-1)
        self.inv_tau = float(inv_tau)
        self.count = pos.numel()
        self.sorted, self.order = torch.sort(pos)
        ps, device = self.sorted, pos.device
        gaps = ps[1:] - ps[:-1]  # ≥ 0, each a local difference
        zero = ps.new_zeros(1)
        # S_c = Σ_{j≤c} (p_c − p_j): S_c = S_{c−1} + c·gap_{c−1}, non-negative terms
        steps = torch.arange(1, self.count, dtype=torch.float64, device=device) * gaps
        self.spread = torch.cat([zero, torch.cumsum(steps, 0)])
        coord = torch.cat([zero, torch.cumsum((gaps * self.inv_tau).clamp_max(GAP_CAP), 0)])  # E_c, in τ
        ks = torch.arange(1, SERIES_TERMS + 1, dtype=torch.float64, device=device)
        kc = coord.unsqueeze(1) * ks  # [B, K]: k·E_c
        self.coord_k = kc
        # below[c, k] = Σ_{j≤c} e^{−k(E_c − E_j)}, above[c, k] = Σ_{j≥c} e^{−k(E_j − E_c)}: both in [1, B]
        self.below = torch.exp(torch.logcumsumexp(kc, 0) - kc)
        self.above = torch.exp(torch.logcumsumexp((-kc).flip(0), 0).flip(0) + kc)
        self.signs = torch.tensor([(-1.0) ** k for k in range(SERIES_TERMS)], dtype=torch.float64, device=device)
        self.ks = ks
        # buckets: power-of-two width at least Tτ, at most MAX_BUCKETS of them over [lo, hi]
        reach = TAIL_Z / self.inv_tau
        self.width = _pow2_at_least(max(reach, (hi - lo) / MAX_BUCKETS))
        self.first = math.floor(lo / self.width)
        n_buckets = math.floor(hi / self.width) - self.first + 1
        self.n_buckets = n_buckets
        first_f = float(self.first)
        edges = (first_f + torch.arange(n_buckets + 1, dtype=torch.float64, device=device)) * self.width
        # a positive is on a side only when it truly lies ≥ Tτ beyond the bucket (the comparison with the rounded
        # edge ± Tτ errs toward the near run)
        self.cut_lin = torch.searchsorted(ps, edges[:-1] - reach, right=False)  # j < cut_lin: p ≤ e_b − Tτ
        self.cut_exp = torch.searchsorted(ps, edges[1:] + reach, right=True)  # j ≥ cut_exp: p ≥ e_{b+1} + Tτ

    def _buckets(self, x: Tensor) -> Tensor:
        # x/width is exact (a power-of-two scale), floor exact; the difference of two nearby integers is exact
        return (torch.floor(x * (1.0 / self.width)) - float(self.first)).clamp_(0, self.n_buckets - 1).long()

    def pair_sums(self, x: Tensor, needs_grad: bool) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """``(Σ_{k, i} softplus((x_k − p_i)·inv_tau)`` in float64, ``∂/∂x`` [n] and ``∂/∂p`` [B] in float64
        (None without ``needs_grad``)``)`` for scores ``x`` (float64) inside the range the buckets were made for."""
        inv_tau, count, ps = self.inv_tau, self.count, self.sorted
        bucket = self._buckets(x)
        c_lin, c_exp = self.cut_lin[bucket], self.cut_exp[bucket]
        total = torch.zeros((), dtype=torch.float64, device=x.device)
        grad_x = torch.zeros_like(x) if needs_grad else None
        grad_sorted = torch.zeros_like(ps) if needs_grad else None
        coef = self.signs / self.ks  # (−1)^{k+1}/k
        # linear side: positives j < c_lin
        has = c_lin > 0
        if bool(has.any()):
            idx = has.nonzero().squeeze(1)
            c = c_lin[idx]
            r = c - 1
            d = (x[idx] - ps[r]) * inv_tau  # ≥ T
            q = torch.exp(-d.unsqueeze(1) * self.ks)  # [n, K]: e^{−k d}
            terms = q * self.below[r]  # Σ_{j<c} e^{−k(x − p_j)/τ}
            cf = c.to(torch.float64)
            total += (cf * d).sum() + self.spread[r].sum() * inv_tau + (terms @ coef).sum()
            if needs_grad:
                grad_x[idx] += inv_tau * (cf - terms @ self.signs)
                # ∂/∂p_j = −inv_tau·Σ_{x: j < c(x)} (1 − Σ_k (−1)^{k+1} e^{−k(x − p_j)/τ})
                counts = torch.bincount(c, minlength=count + 1).to(torch.float64)
                on_lin = counts.flip(0).cumsum(0).flip(0)[1:]  # #scores with c > j
                carried = self._carry_down(q, r)  # Σ_{x: c(x)−1 ≥ j} e^{−k(x − p_j)/τ}, [B, K]
                grad_sorted -= inv_tau * (on_lin - carried @ self.signs)
        # exponential side: positives j ≥ c_exp
        has = c_exp < count
        if bool(has.any()):
            idx = has.nonzero().squeeze(1)
            e = c_exp[idx]
            d = (ps[e] - x[idx]) * inv_tau  # ≥ T
            q = torch.exp(-d.unsqueeze(1) * self.ks)
            terms = q * self.above[e]
            total += (terms @ coef).sum()
            if needs_grad:
                grad_x[idx] += inv_tau * (terms @ self.signs)
                carried = self._carry_up(q, e)  # Σ_{x: c_exp(x) ≤ j} e^{−k(p_j − x)/τ}
                grad_sorted -= inv_tau * (carried @ self.signs)
        # the near run: every pair, directly
        lengths = (c_exp - c_lin).clamp_min(0)
        near = lengths.nonzero().squeeze(1)
        if near.numel():
            total += self._near(x, near, c_lin[near], lengths[near], grad_x, grad_sorted)
        grad_pos = None
        if needs_grad:
            grad_pos = torch.empty_like(grad_sorted)
            grad_pos[self.order] = grad_sorted
        return total, grad_x, grad_pos

    def _carry_down(self, q: Tensor, slot: Tensor) -> Tensor:
        """``Y[j, k] = Σ_{x: slot(x) ≥ j} q_x,k·e^{−k(p_{slot(x)} − p_j)/τ}`` (the linear side's exponentials seen
        from each positive below the scores' slots)."""
        dep = torch.zeros(self.count, q.size(1), dtype=torch.float64, device=q.device)
        dep.index_add_(0, slot, q)
        kc = self.coord_k
        return torch.exp(torch.logcumsumexp((torch.log(dep) - kc).flip(0), 0).flip(0) + kc)

    def _carry_up(self, q: Tensor, slot: Tensor) -> Tensor:
        """``Y[j, k] = Σ_{x: slot(x) ≤ j} q_x,k·e^{−k(p_j − p_{slot(x)})/τ}`` (the exponential side's, from above)."""
        dep = torch.zeros(self.count, q.size(1), dtype=torch.float64, device=q.device)
        dep.index_add_(0, slot, q)
        kc = self.coord_k
        return torch.exp(torch.logcumsumexp(torch.log(dep) + kc, 0) - kc)

    def _near(
        self, x: Tensor, rows: Tensor, start: Tensor, lengths: Tensor, grad_x: Tensor | None, grad_sorted: Tensor | None
    ) -> Tensor:
        """Every pair of the near runs (``rows``' scores against positives ``start … start + length``)."""
        total = torch.zeros((), dtype=torch.float64, device=x.device)
        ends = torch.cumsum(lengths, 0)
        begins = ends - lengths
        # whole rows per pass, about PAIR_CHUNK pairs each
        n_pairs = int(ends[-1])
        targets = torch.arange(PAIR_CHUNK, max(n_pairs, PAIR_CHUNK), PAIR_CHUNK, device=x.device)
        cuts = torch.searchsorted(ends, targets).add(1).clamp_max(rows.numel())
        bounds = [0, *sorted(set(cuts.tolist())), rows.numel()]
        for a, b in zip(bounds[:-1], bounds[1:]):
            if b <= a:
                continue
            lens = lengths[a:b]
            owner = torch.repeat_interleave(torch.arange(b - a, device=x.device), lens)
            within = torch.arange(owner.numel(), device=x.device) - (begins[a:b] - begins[a])[owner]
            pos_idx = start[a:b][owner] + within
            row = rows[a:b][owner]
            z = (x[row] - self.sorted[pos_idx]) * self.inv_tau
            total += torch.nn.functional.softplus(z).sum()
            if grad_x is not None:
                s = torch.sigmoid(z)
                grad_x.index_add_(0, row, s * self.inv_tau)
                grad_sorted.index_add_(0, pos_idx, s * -self.inv_tau)
        return total

    def near_pairs(self, x: Tensor) -> int:
        """How many pairs of ``x`` the near runs hold (a host read)."""
        bucket = self._buckets(x)
        return int((self.cut_exp[bucket] - self.cut_lin[bucket]).clamp_min(0).sum())
