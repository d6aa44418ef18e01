"""MW's pairs far from the grid: Σ softplus((n − p)/τ) from sorted positives, in O(log B) work per score.

Scores outside the grid's window (:mod:`._mw_grid`) are compared with every positive by splitting the positives,
sorted, into three runs around each score ``n`` (``z = (n − p)/τ``):

* **linear side** (``p ≤ n − Tτ``, z ≥ T): ``softplus(z) = z + Σ_{k≤K} (−1)^{k+1} e^{−kz}/k`` (truncation below
  ``e^{−(K+1)T}/((K+1)T)`` relative): the linear part is ``(c·(n − p_{c−1}) + S_{c−1})/τ`` with ``S_c = Σ_{j≤c}
  (p_c − p_j)`` a cumulative sum of non-negative gaps (no cancellation whatever the scores' magnitude), and each
  exponential is factorised, ``Σ_{j<c} e^{−k(n − p_j)/τ} = e^{−k(n − p_{c−1})/τ}·Σ_{j<c} e^{−k(p_{c−1} − p_j)/τ}``;
* **exponential side** (``p ≥ n + Tτ``, z ≤ −T): ``softplus(z) = Σ_{k≤K} (−1)^{k+1} e^{kz}/k``, factorised the
  same way around the first positive of the run (truncation below ``e^{−KT}/(K+1)`` relative);
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

__all__ = ["SERIES_TERMS", "TAIL_Z", "Tails", "stable_partition"]

#: exponential terms K of each side's series, and the distance T (in τ) beyond which a pair is summed by them: the
#: first neglected term is, relative to the pair's value, e^{−KT}/(K+1) ≈ 7e-10 on the exponential side (below the
#: grid's 1e-9) and e^{−(K+1)T}/((K+1)T) ≈ 3e-15 on the linear side; e^{−(K+1)T} ≈ 1e-13 absolute for σ
SERIES_TERMS = 2
TAIL_Z = 10.0
#: gaps between sorted positives are capped at this many τ in the log-cumulative sums: e^{−745} is float64's
#: smallest subnormal, so every term across a larger gap is zero in float64 anyway
GAP_CAP = 750.0
#: the most buckets (their cuts are searched once each)
MAX_BUCKETS = 2**16
#: near pairs evaluated per pass
PAIR_CHUNK = 2**20


def stable_partition(mask: Tensor, count: int) -> Tensor:
    """The positions of ``mask``'s True entries, then of its False ones, each in order, without a host read
    (``nonzero`` waits for the device): ``count`` is the number of True entries, known already."""
    index = torch.arange(mask.numel(), device=mask.device)
    before = torch.cumsum(mask, 0)  # True entries up to and including each position
    dest = torch.where(mask, before - 1, count + index - before)
    order = torch.empty_like(index)
    order[dest] = index
    return order


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
        spread = torch.cat([zero, torch.cumsum(steps, 0)])
        coord = torch.cat([zero, torch.cumsum((gaps * self.inv_tau).clamp_max(GAP_CAP), 0)])  # E_c, in τ
        ks = torch.arange(1, SERIES_TERMS + 1, dtype=torch.float64, device=device)
        kc = coord.unsqueeze(1) * ks  # [B, K]: k·E_c
        self.coord_k = kc
        # below[c, k] = Σ_{j≤c} e^{−k(E_c − E_j)}, above[c, k] = Σ_{j≥c} e^{−k(E_j − E_c)}: both in [1, B]
        below = torch.exp(torch.logcumsumexp(kc, 0) - kc)
        above = torch.exp(torch.logcumsumexp((-kc).flip(0), 0).flip(0) + kc)
        self.signs = torch.tensor([(-1.0) ** k for k in range(SERIES_TERMS)], dtype=torch.float64, device=device)
        # buckets: power-of-two width at least Tτ, at most MAX_BUCKETS of them over [lo, hi]
        reach = TAIL_Z / self.inv_tau
        self.width = _pow2_at_least(max(reach, (hi - lo) / MAX_BUCKETS))
        self.first = math.floor(lo / self.width)
        self.n_buckets = n_buckets = math.floor(hi / self.width) - self.first + 1
        edges = (float(self.first) + torch.arange(n_buckets + 1, dtype=torch.float64, device=device)) * self.width
        # a positive is on a side only when it truly lies ≥ Tτ beyond the bucket (the comparison with the rounded
        # edge ± Tτ errs toward the near run)
        cut_lin = torch.searchsorted(ps, edges[:-1] - reach, right=False)  # j < cut_lin: p ≤ e_b − Tτ
        cut_exp = torch.searchsorted(ps, edges[1:] + reach, right=True)  # j ≥ cut_exp: p ≥ e_{b+1} + Tτ
        self.cut_lin, self.cut_exp = cut_lin, cut_exp
        self.near_length = (cut_exp - cut_lin).clamp_min(0)
        # per bucket, what a score needs of each side: the side's nearest positive (a finite stand-in, lo or hi,
        # where the side is empty: every coefficient is then 0), and the coefficients of the series
        self.lin_slot, self.exp_slot = (cut_lin - 1).clamp_min(0), cut_exp.clamp_max(self.count - 1)
        self.has_lin = (cut_lin > 0).to(torch.float64)
        self.has_exp = (cut_exp < self.count).to(torch.float64)
        self.lin_near = torch.where(cut_lin > 0, ps[self.lin_slot], lo)
        self.lin_count = cut_lin.to(torch.float64)
        self.lin_spread = spread[self.lin_slot] * self.inv_tau * self.has_lin
        self.lin_coef = [below[self.lin_slot, k] * self.signs[k] * self.has_lin for k in range(SERIES_TERMS)]
        self.exp_near = torch.where(cut_exp < self.count, ps[self.exp_slot], hi)
        self.exp_coef = [above[self.exp_slot, k] * self.signs[k] * self.has_exp for k in range(SERIES_TERMS)]
        self.inv_k = [1.0 / k for k in range(1, SERIES_TERMS + 1)]
        columns = [self.lin_count]
        for k in range(SERIES_TERMS):
            columns.extend([self.lin_coef[k], self.exp_coef[k]])
        self.grad_table = torch.stack(columns, dim=1)
        self.near_grad = torch.zeros_like(ps)  # the near runs' share of ∂/∂p (sorted), until :meth:`finish`

    def buckets(self, x: Tensor) -> Tensor:
        """Each score's bucket: ``x/width`` is exact (a power-of-two scale), its floor too, and the difference of two
        nearby integers in float64 is exact."""
        return (torch.floor(x * (1.0 / self.width)) - float(self.first)).clamp_(0, self.n_buckets - 1).long()

    def start(self) -> Tensor:
        """A fresh accumulator of per-bucket sums for :meth:`add` (one call of the pair stage)."""
        return torch.zeros(2 + 2 * SERIES_TERMS, self.n_buckets, dtype=torch.float64, device=self.sorted.device)

    def near_counts(self, x: Tensor, keep: Tensor) -> Tensor:
        """``[rows, pairs]`` (device int64) of the near runs of the scores ``x`` where ``keep`` (bool): what
        :meth:`add` needs on the host to size its passes, for the caller to read with its own counts in one read."""
        # the buckets of float64 scores, as :meth:`add` finds them (float32 products may flush to zero)
        lengths = self.near_length.index_select(0, self.buckets(x.to(torch.float64))).masked_fill(~keep, 0)
        return torch.stack([torch.count_nonzero(lengths), lengths.sum()])

    def add(
        self,
        x: Tensor,
        sums: Tensor,
        needs_grad: bool,
        skip: Tensor | None = None,
        near_size: tuple[int, int] | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Scores ``x`` (float64, inside the range the buckets were made for) against every positive: their near
        runs' loss, returned with ``∂/∂x`` (float64, None without ``needs_grad``); the sides' share of the loss and
        of the positives' gradient goes into ``sums`` (per bucket) for :meth:`finish`. The near runs' share of the
        positives' gradient is added to :attr:`near_grad` (sorted order). ``skip``: a bool mask of what counts
        for nothing (the rows' own positives; their ``∂/∂x`` is the caller's to discard). They are zeroed, not
        subtracted: a subtraction would leave rounding residue on a loss that may be 1e-25. ``near_size``: the
        near runs' ``(rows, pairs)`` (:meth:`near_counts`, read by the caller); without it they are read here.

        Per score: its bucket, the distance to each side's nearest positive and one exponential per side; the loss
        and the positives' gradient need only per-bucket sums of those (the side's coefficients are the bucket's)."""
        inv_tau = self.inv_tau
        bucket = self.buckets(x)
        d_lin = (x - self.lin_near.index_select(0, bucket)).mul_(inv_tau)  # ≥ T where the side is not empty
        d_exp = (self.exp_near.index_select(0, bucket) - x).mul_(inv_tau)
        powers = [torch.exp(-d_lin), torch.exp(-d_exp)]  # e^{−d}, then e^{−2d}, ...
        for k in range(1, SERIES_TERMS):
            powers.extend([powers[2 * k - 2] * powers[0], powers[2 * k - 1] * powers[1]])
        ones = torch.ones_like(x)
        lengths = self.near_length.index_select(0, bucket)
        if skip is not None:
            for t in (ones, d_lin, *powers):
                t.masked_fill_(skip, 0.0)
            lengths = lengths.masked_fill(skip, 0)
        sums[0].index_add_(0, bucket, ones)
        sums[1].index_add_(0, bucket, d_lin)
        for i, power in enumerate(powers):
            sums[2 + i].index_add_(0, bucket, power)
        grad_x = None
        if needs_grad:
            coef = self.grad_table.index_select(0, bucket)  # [n, 1 + 2K]: c, then the sides' coefficients
            # σ = c − Σ_k a_k q_lin^k + Σ_k b_k q_exp^k, by Horner's rule on each side
            lin, ex = coef[:, 2 * SERIES_TERMS - 1].clone(), coef[:, 2 * SERIES_TERMS].clone()
            for k in range(SERIES_TERMS - 2, -1, -1):
                lin.mul_(powers[0]).add_(coef[:, 1 + 2 * k])
                ex.mul_(powers[1]).add_(coef[:, 2 + 2 * k])
            grad_x = (coef[:, 0] - lin.mul_(powers[0]) + ex.mul_(powers[1])).mul_(inv_tau)
        # the near run: every pair, directly
        total = torch.zeros((), dtype=torch.float64, device=x.device)
        if near_size is None:
            near_size = torch.stack([torch.count_nonzero(lengths), lengths.sum()]).tolist()
        n_rows, n_pairs = near_size
        if n_rows:
            near = stable_partition(lengths > 0, n_rows)[:n_rows]
            total = self._near(x, near, self.cut_lin[bucket[near]], lengths[near], grad_x, n_pairs)
        return total, grad_x

    def finish(self, sums: Tensor, needs_grad: bool) -> tuple[Tensor, Tensor | None]:
        """The sides' loss from the per-bucket ``sums`` of :meth:`add`, and the positives' whole gradient (the
        sides' and :attr:`near_grad`, which it resets; float64, input order)."""
        per_count, lin_power, exp_power = sums[0], sums[2::2], sums[3::2]  # [K, n_b] each
        total = (self.lin_count * sums[1]).sum() + (self.lin_spread * per_count).sum()
        for k in range(SERIES_TERMS):
            sides = (self.lin_coef[k] * lin_power[k]).sum() + (self.exp_coef[k] * exp_power[k]).sum()
            total += sides * self.inv_k[k]
        if not needs_grad:
            return total, None
        # ∂/∂p_j = −inv_tau·Σ_x σ((x − p_j)/τ): the bare exponentials summed per bucket, then per slot (the side's
        # nearest positive), then carried along the sorted positives
        count, device = self.count, sums.device
        on_lin = torch.zeros(count + 1, dtype=torch.float64, device=device)
        on_lin.index_add_(0, self.cut_lin, per_count)
        on_lin = on_lin.flip(0).cumsum(0).flip(0)[1:]  # #scores with c > j
        lin_dep = torch.zeros(count, SERIES_TERMS, dtype=torch.float64, device=device)
        lin_dep.index_add_(0, self.lin_slot, (lin_power * self.has_lin).T)
        exp_dep = torch.zeros(count, SERIES_TERMS, dtype=torch.float64, device=device)
        exp_dep.index_add_(0, self.exp_slot, (exp_power * self.has_exp).T)
        down, up = self._carry_down(lin_dep) @ self.signs, self._carry_up(exp_dep) @ self.signs
        grad_sorted = -self.inv_tau * (on_lin - down + up) + self.near_grad
        self.near_grad = torch.zeros_like(self.near_grad)
        grad_pos = torch.empty_like(grad_sorted)
        grad_pos[self.order] = grad_sorted
        return total, grad_pos

    def pair_sums(self, x: Tensor, needs_grad: bool) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """``(Σ_{k, i} softplus((x_k − p_i)·inv_tau)`` in float64, ``∂/∂x`` [n] and ``∂/∂p`` [B] in float64
        (None without ``needs_grad``)``)``: :meth:`add` and :meth:`finish` at once."""
        sums = self.start()
        near, grad_x = self.add(x, sums, needs_grad)
        sides, grad_pos = self.finish(sums, needs_grad)
        return near + sides, grad_x, grad_pos

    def _carry_down(self, dep: Tensor) -> Tensor:
        """``Y[j, k] = Σ_{i ≥ j} dep[i, k]·e^{−k(p_i − p_j)/τ}`` (the linear side's exponentials, deposited at each
        score's nearest positive, seen from each positive below)."""
        kc = self.coord_k
        return torch.exp(torch.logcumsumexp((torch.log(dep.clamp_min(0)) - kc).flip(0), 0).flip(0) + kc)

    def _carry_up(self, dep: Tensor) -> Tensor:
        """``Y[j, k] = Σ_{i ≤ j} dep[i, k]·e^{−k(p_j − p_i)/τ}`` (the exponential side's, seen from above)."""
        kc = self.coord_k
        return torch.exp(torch.logcumsumexp(torch.log(dep.clamp_min(0)) + kc, 0) - kc)

    def _near(
        self, x: Tensor, rows: Tensor, start: Tensor, lengths: Tensor, grad_x: Tensor | None, n_pairs: int
    ) -> Tensor:
        """Every pair of the near runs (``rows``' scores against positives ``start … start + length``; ``n_pairs``
        of them), :data:`PAIR_CHUNK` pairs per pass, each pair's row found by a binary search (no host read)."""
        total = torch.zeros((), dtype=torch.float64, device=x.device)
        ends = torch.cumsum(lengths, 0)
        begins = ends - lengths
        for a in range(0, n_pairs, PAIR_CHUNK):
            pair = torch.arange(a, min(a + PAIR_CHUNK, n_pairs), device=x.device)
            owner = torch.searchsorted(ends, pair, right=True)
            pos_idx = start[owner] + (pair - begins[owner])
            row = rows[owner]
            z = (x[row] - self.sorted[pos_idx]) * self.inv_tau
            total += torch.nn.functional.softplus(z).sum()
            if grad_x is not None:
                s = torch.sigmoid(z)
                grad_x.index_add_(0, row, s, alpha=self.inv_tau)
                self.near_grad.index_add_(0, pos_idx, s, alpha=-self.inv_tau)
        return total
