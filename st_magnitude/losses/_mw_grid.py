"""MW's pair stage in O(N + B·G) instead of O(B·N): node tables of the positives, Taylor moments of the negatives.

Paper 001 eq. 3 sums ``softplus(z)`` over every (positive ``p_i``, negative ``n_k``) pair, ``z = (n_k − p_i)/τ``.
With B positives and N = B·B(1+H) negatives that is B·N = O(B³) pairs. The sum is a smooth function of where the
points lie, so it is evaluated on a grid instead, *exactly to float64 rounding plus a truncation below 1e-9*:

1. **Grid with exact offsets.** Nodes ``x_j = (J0 + j)·h`` with ``h = 2^e`` the largest power of two with
   ``α = h/τ ≤ α_max`` of the chosen level. A score ``n`` then sits at ``t = n/h`` (exact: a power-of-two scale),
   node ``j = round(t)`` and offset ``u = t − j ∈ [−½, ½]`` (exact: Sterbenz). No interpolation, no rounding of
   positions.
2. **Taylor in the negative's offset.** ``softplus(α(J0 + j − p_i/h) + αu) = Σ_m softplus⁽ᵐ⁾(z_ij)·(αu)^m/m!`` with
   ``z_ij = α(J0 + j − p_i/h)``; softplus is analytic with radius π (poles at ±iπ), so with ``|αu| ≤ α/2`` the series
   truncated at degree D errs by at most ~1e-10 per pair, *relative* also in the exponential tail (every derivative
   of softplus is ~e^z there). The levels ``(α_max, D)`` below are the smallest D reaching 1e-9 on the loss (relative)
   and on ``softplus'`` (absolute), measured over z ∈ [−60, 60]; ``tests/losses/test_mw_grid.py`` checks the bound.
3. **The loss and every gradient are bilinear in two small tables.** With the negatives' raw moments
   ``M[j, m] = Σ_{k at node j} (αu_k)^m`` (one deposit pass over the N scores) and the positives' node tables
   ``Tl[j, m] = Σ_i softplus⁽ᵐ⁾(z_ij)/m!``, ``Tg[j, m] = Σ_i softplus⁽ᵐ⁺¹⁾(z_ij)/m!`` (computed *directly*, B × G
   evaluations, so they are relative-accurate in both tails without any FFT cancellation):

   - loss ``= Σ_{j,m} Tl[j, m]·M[j, m]``;
   - ``∂/∂n_k = (1/τ)·Σ_m Tg[j_k, m]·(αu_k)^m`` (a gather of D+1 node values and Horner's rule, per negative);
   - ``∂/∂p_i = −(1/τ)·Σ_{j,m} softplus⁽ᵐ⁺¹⁾(z_ij)/m!·M[j, m]`` (B × G again).

   A learnable 1/τ gets its gradient through the scaled scores (the caller multiplies them by it), as before.
4. **The row's own positive** is deposited with the rest of the score block (no masked copy) and its moments are
   subtracted again; its gradient entry is set to 0 (it is no negative).
5. **Bounded grid, exact tails.** G is the score range over h. A range wider than the finest level covers in
   :data:`MAX_NODES` nodes (thousands of τ: dot, qnorm or dnorm scores, cosine at τ = 1e-6, outliers) may instead get a
   *paged* grid: pages of :data:`PAGE_NODES` nodes (of one of :data:`PAGE_LEVELS`) where a sample of the scores says
   the grid is cheaper (many scores among many positives), and every other score summed against every positive from the
   sorted positives (:class:`~st_magnitude.losses._mw_tails.Tails`: softplus is linear on one side and a short
   exponential series on the other, so both sides are prefix sums and factorised exponentials; only the pairs within
   ~3Tτ of a score are evaluated one by one, and a page is gridded where those would be many). The cost model
   (:data:`NEG_NS`, :data:`POS_NS`, :data:`TAIL_NS`, :data:`NEAR_NS`) picks between a whole-range level and the pages.
   Positives need no window: their node tables are exact wherever they lie. Node numbers are float64 integers (scores
   past 1e17 have node numbers beyond int64).

Cost: one pass over the scores, in cache-sized chunks, with D+1 deposits and D+1 gathers per score, plus ``2·B·G``
table evaluations; about cross-entropy's cost from B ≈ 2,048 on (``python benchmarks/bench_mw_pairs.py``, the table in
docs/mw_loss.md; ``--levels`` times each level). One host read per call: the range of the scores and positives;
a paged grid adds one planning its pages (every level's cost and pages, read at once) and one per pass of
:data:`CPU_CHUNK` / :data:`GPU_CHUNK` scores (how many lie off the pages, and their near pairs: the pass's shapes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from st_magnitude._cpu_shortcuts import takes_cpu_shortcut
from st_magnitude.losses._mw_tails import TAIL_Z, Tails, stable_partition

__all__ = [
    "GridPlan",
    "LEVELS",
    "MAX_NODES",
    "grid_pair_sum",
    "level_of",
    "make_plan",
    "pair_passes",
    "pair_sums",
    "plan_for_range",
    "score_range",
]

#: ``(α_max, D)``: grid spacing over τ at most α_max, Taylor degree D (truncation ≤ 1e-9, module docstring)
LEVELS: tuple[tuple[float, int], ...] = ((1 / 16, 4), (1 / 8, 5), (1 / 4, 6), (1 / 2, 8), (1.0, 11), (2.0, 17))
#: the most nodes a grid may have; beyond, a window of the bulk is gridded and the rest is paired exactly
MAX_NODES = 2**14
#: scores per pass on the CPU: the chunk's temporaries stay in cache
CPU_CHUNK = 2**18
#: scores per pass on a GPU (bounds the pass's temporaries, a few bytes per score, whatever the batch)
GPU_CHUNK = 2**24
#: (positive, node) evaluations per block of the positives' tables
TABLE_BLOCK = 2**16
#: measured costs in ns on one CPU thread (``python benchmarks/bench_mw_pairs.py --levels``, B = 1,024 and 4,096):
#: per score ``NEG_NS[0] + NEG_NS[1]·(D+1)``, per (positive, node), both table passes, ``POS_NS[0] + POS_NS[1]·(D+2)``
NEG_NS = (4.7, 1.74)
POS_NS = (2.6, 1.1)
#: costs in ns on one CPU thread of a score summed by the tails instead (``_mw_tails.py``) and of one pair of a
#: near run there: estimates from timing ``Tails.pair_sums`` alone on a loaded machine, not yet fitted by a
#: committed command
TAIL_NS = 60.0
NEAR_NS = 25.0
#: ranges wider than this many τ (the finest level's reach in :data:`MAX_NODES` nodes) may be paged
PAGES_FROM = MAX_NODES * LEVELS[0][0]
#: nodes per page of a paged grid, the most page numbers it spans, and the strided sample of the scores it is
#: planned from
PAGE_NODES = 2**9
#: the levels a paged grid may take (coarser pages cover more of a dense region per table entry)
PAGE_LEVELS = (0, 1, 2, 3)
MAX_PAGE_SPAN = 2**22
PAGE_SAMPLE = 2**16


def _softplus_polys(q_max: int) -> np.ndarray:
    """Coefficients (ascending powers of s = σ(z)) of ``softplus⁽q⁾ = P_q(s)`` for q = 1..q_max:
    ``P_1 = s``, ``P_{q+1} = P_q'(s)·s(1 − s)`` (since ds/dz = s(1 − s))."""
    polys = np.zeros((q_max + 1, q_max + 2))
    polys[1, 1] = 1.0
    for q in range(1, q_max):
        d = np.polynomial.polynomial.polyder(polys[q])
        nxt = np.polynomial.polynomial.polymul(d, [0.0, 1.0, -1.0])
        polys[q + 1, : nxt.size] = nxt[: q_max + 2]
    return polys


_POLYS = _softplus_polys(LEVELS[-1][1] + 1)


def _spacing(inv_tau: float, alpha_max: float) -> float:
    """The largest power of two h with h·inv_tau ≤ alpha_max."""
    return 2.0 ** math.floor(math.log2(alpha_max / inv_tau))


def score_range(*scores: Tensor) -> tuple[float, float]:
    """``(min, max)`` over score tensors (a block and its positives), read on the host in one read (the pair
    stage's one host read); refuses non-finite scores, which would put a point at no node."""
    ends = [end.to(torch.float64) for t in scores for end in torch.aminmax(t.detach())]
    lo_f, hi_f = torch.stack(ends).aminmax()
    lo_f, hi_f = torch.stack([lo_f, hi_f]).tolist()
    if not (math.isfinite(lo_f) and math.isfinite(hi_f)):
        raise ValueError(
            f"MW scores must be finite, got a score range [{lo_f}, {hi_f}]: an embedding or the temperature "
            "overflows float32 (check the model's outputs and the similarity's scale)"
        )
    return lo_f, hi_f


@dataclass
class GridPlan:
    """The grid of one step: the positives (scaled so that τ = ``1/inv_tau``), the spacing, the node range, the
    positives' node tables and the moments deposited so far (for a positive gradient deferred to the end of a
    cached step). Made by :func:`plan_for_range` (a level by :func:`make_plan`, nodes by :meth:`build`)."""

    positives: Tensor  # [B] float64, detached
    inv_tau: float
    alpha: float
    degree: int
    h: float
    j0: int = 0
    nodes: int = 0
    loss_table: Tensor | None = None  # [nodes + 1, D + 1] float64 (last row: the outliers' dummy node, zero)
    grad_table: Tensor | None = None  # [nodes + 1, D + 1] in the scores' dtype, times inv_tau
    moments: Tensor | None = None  # [nodes, D + 1] float64, accumulated (times the chunks' output gradients)
    windowed: bool = False  # the grid covers pages of the range only; scores outside them go to ``tails``
    tails: Tails | None = None  # the sorted positives' sums for the scores outside the pages
    page_nodes: int = 0  # nodes per page (windowed): node index = slot·page_nodes + node within the page
    page_first: float = 0.0  # page number of ``page_slots[0]``
    page_slots: Tensor | None = None  # [span] int64: each page's slot, −1 where the page is not on the grid
    node_start: Tensor | None = None  # [nodes] float64: the absolute node number each node's page starts at
    wide: bool = False  # node numbers beyond float32's exact integers (2^22 here): locate scores in float64
    deep_tail: bool = False  # some |z| passes 690: σ from its logarithm (see _sigmoid_blocks)
    exact_positive_grad: Tensor = field(init=False)  # [B] float64: the exactly paired scores' share, accumulated
    factorials: Tensor = field(init=False)

    def __post_init__(self) -> None:
        self.exact_positive_grad = torch.zeros_like(self.positives)
        self.factorials = torch.tensor(
            [math.factorial(m) for m in range(self.degree + 1)], dtype=torch.float64, device=self.positives.device
        )

    # -- the positives' node tables ------------------------------------------------------------------------------
    def _sigmoid_blocks(self, j_begin: int, j_end: int):
        """Yield ``(rows, z, s)`` with ``z_ij = α(J0 + j − p_i/h)`` and ``s = σ(z)``, for blocks of positives over
        nodes ``j_begin:j_end`` (about :data:`TABLE_BLOCK` entries each)."""
        device = self.positives.device
        node_t = torch.arange(j_begin, j_end, dtype=torch.float64, device=device)
        # (page start − p_i/h) first, then the node within the page: node numbers of scores past 1e17 exceed int64
        # (a Python int that large cannot become a tensor); starts are float64 integers (:func:`_first_node`)
        if self.page_nodes:
            start = self.node_start[j_begin:j_end].unsqueeze(0)
            node_t = torch.remainder(node_t, self.page_nodes)
        else:
            start = torch.full((1, 1), float(self.j0), dtype=torch.float64, device=device)
        scaled = self.positives / self.h
        step = max(1, TABLE_BLOCK // max(1, j_end - j_begin))
        for begin in range(0, scaled.numel(), step):
            rows = slice(begin, begin + step)
            z = ((start - scaled[rows].unsqueeze(1)) + node_t.unsqueeze(0)) * self.alpha  # [b, width]
            # torch.sigmoid flushes σ(z) to 0 below z ≈ −709, where softplus(z) still holds e^z: the Taylor terms
            # beyond the first would be lost there; exp(log σ) keeps σ down to float64's subnormals (twice the cost)
            s = torch.exp(torch.nn.functional.logsigmoid(z)) if self.deep_tail else torch.sigmoid(z)
            yield rows, z, s

    def _tables(self, j_begin: int, j_end: int) -> tuple[Tensor, Tensor]:
        """``(Tl, Tg)`` of nodes ``j_begin:j_end``. softplus⁽q⁾ = P_q(σ) for q ≥ 1 (:func:`_softplus_polys`), so
        Σ_i softplus⁽q⁾(z_ij) = Σ_k c_qk·Σ_i σ(z_ij)^k: one pass of power sums over the positives, then a small
        matrix product. In the exponential tail σ ≈ e^z and P_q(σ) = σ(1 + O(σ)), so the tables keep their relative
        accuracy where the loss needs it; near σ ≈ 1 (z ≫ 0) they are accurate relative to the loss's linear part."""
        device, top = self.positives.device, self.degree + 1
        width = j_end - j_begin
        sp_sum = torch.zeros(width, dtype=torch.float64, device=device)
        power_sums = torch.zeros(width, top + 1, dtype=torch.float64, device=device)
        for _, z, s in self._sigmoid_blocks(j_begin, j_end):
            sp_sum += torch.nn.functional.softplus(z).sum(dim=0)
            power = s
            for k in range(1, top + 1):
                power_sums[:, k] += power.sum(dim=0)
                if k < top:
                    power = power * s
        coef = torch.as_tensor(_POLYS[1 : top + 1, : top + 1], dtype=torch.float64, device=device)  # [q, k]
        derivs = torch.cat([sp_sum.unsqueeze(1), power_sums @ coef.T], dim=1)  # [width, q = 0..D+1]
        loss_t = derivs[:, :top] / self.factorials
        grad_t = derivs[:, 1:] / self.factorials * self.inv_tau
        return loss_t, grad_t

    def build(self, lo_node: int, hi_node: int, dtype: torch.dtype) -> None:
        """Grid nodes ``lo_node..hi_node`` (absolute) and their tables; ``dtype`` is the scores' (the gradient
        table's). The row after the last node is the outliers' dummy node (zero tables)."""
        self.j0, self.nodes = lo_node, hi_node - lo_node + 1
        loss_t, grad_t = self._tables(0, self.nodes)
        zero = loss_t.new_zeros(1, self.degree + 1)
        self.loss_table = torch.cat([loss_t, zero])
        self.grad_table = torch.cat([grad_t, zero]).to(dtype)
        self.moments = loss_t.new_zeros(self.nodes, self.degree + 1)

    def build_pages(self, pages: Tensor, first: float, last: float, page_nodes: int, dtype: torch.dtype) -> None:
        """A grid of ``pages`` (sorted absolute page numbers, float64; ``first`` and ``last`` of them, read on the
        host already) of ``page_nodes`` nodes each, and its tables; the scores on no page go to :attr:`tails`."""
        device = self.positives.device
        self.page_nodes = page_nodes
        self.page_first = first if pages.numel() else 0.0
        span = int(last - first) + 1 if pages.numel() else 1
        self.page_slots = torch.full((span,), -1, dtype=torch.int64, device=device)
        self.page_slots[(pages - self.page_first).long()] = torch.arange(pages.numel(), device=device)
        self.node_start = (pages * page_nodes).repeat_interleave(page_nodes)
        self.build(0, pages.numel() * page_nodes - 1, dtype)

    def deferred_positive_grad(self) -> Tensor:
        """The positives' gradient of every chunk run with this plan (their moments accumulated in backward)."""
        return self.positive_grad(self.moments) + self.exact_positive_grad

    def positive_grad(self, moments: Tensor) -> Tensor:
        """``∂/∂p_i`` of Σ_{j,m} Tl[j, m]·moments[j, m] (the positives' share of the loss): −inv_tau·Σ_{j,m}
        softplus⁽ᵐ⁺¹⁾(z_ij)/m!·moments[j, m] = −inv_tau·Σ_k Σ_j σ(z_ij)^k·W[j, k], with W the moments folded
        into the polynomials' coefficients; float64 [B]."""
        top = self.degree + 1
        coef = torch.as_tensor(_POLYS[1 : top + 1, : top + 1], dtype=torch.float64, device=self.positives.device)
        weights = (moments / self.factorials) @ coef  # [nodes, k = 0..D+1]; k = 0 is 0 (every P_q(0) = 0)
        out = torch.zeros_like(self.positives)
        for rows, _, s in self._sigmoid_blocks(0, self.nodes):
            acc = s @ weights[:, 1]
            power = s
            for k in range(2, top + 1):
                power = power * s
                acc += power @ weights[:, k]
            out[rows] = acc
        return out * -self.inv_tau


def make_plan(positives: Tensor, inv_tau: float, level: int) -> GridPlan:
    """A plan (no nodes yet) at :data:`LEVELS` ``[level]``."""
    alpha_max, degree = LEVELS[level]
    h = _spacing(inv_tau, alpha_max)
    pos = positives.detach().to(torch.float64).reshape(-1)
    return GridPlan(positives=pos, inv_tau=float(inv_tau), alpha=h * inv_tau, degree=degree, h=h)


def level_of(plan: GridPlan) -> int:
    """The index in :data:`LEVELS` of the plan's level (each level has its own degree)."""
    return [degree for _, degree in LEVELS].index(plan.degree)


def _deposit(table: Tensor, index: Tensor, weights: Tensor | None, nodes: int) -> None:
    """``table[index[k]] += weights[k]`` (float64): bincount on the CPU (sequential, deterministic), ``index_add_``
    elsewhere (deterministic under ``torch.use_deterministic_algorithms(True)``)."""
    if takes_cpu_shortcut(table):
        table += torch.bincount(index, weights, minlength=nodes)[:nodes]
    else:
        ones = torch.ones_like(index, dtype=torch.float64) if weights is None else weights
        table.index_add_(0, index, ones)


def _index_dtype(x: Tensor) -> torch.dtype:
    """Node indices as int32 on the CPU (``bincount`` and ``index_select`` read half the bytes), int64 elsewhere
    (``index_add_``)."""
    return torch.int32 if x.device.type == "cpu" else torch.int64


def _locate(x: Tensor, plan: GridPlan) -> tuple[Tensor, Tensor]:
    """Node indices (relative to j0, as floats) and offsets ``u = t − node`` (x's dtype), both exact. Without a
    window a score a rounding error outside the range (a cached step's blocks are scored again) stays at the edge
    node, with its true offset."""
    t = (x.double() if plan.wide else x) * (1.0 / plan.h)
    node = torch.round(t)
    if plan.page_nodes:  # node index = slot·P + node within its page; −1 off the pages (all exact in float)
        size = plan.page_nodes
        page = torch.floor(node * (1.0 / size))
        u = t - node
        rel = page - plan.page_first
        span = plan.page_slots.numel()
        slot = plan.page_slots.index_select(0, rel.clamp(0, span - 1).long())
        slot = slot.masked_fill_((rel < 0) | (rel > span - 1), -1).to(t.dtype)
        index = torch.where(slot < 0, -1.0, slot * size + (node - page * size))
        return index, u
    if not plan.windowed:
        node.clamp_(float(plan.j0), float(plan.j0) + plan.nodes - 1)
    u = t - node
    node -= float(plan.j0)  # exact: both are integers in float64 near each other (Sterbenz) or small
    return node, u


class _GridPairs(torch.autograd.Function):
    """Σ_i Σ_k softplus((n_k − p_i)·inv_tau) over the block's entries except each row's own positive; the positives'
    gradient is returned (``deferred=False``) or accumulated in the plan (a plan shared by a cached step's chunks)."""

    @staticmethod
    def forward(ctx, positives, block, plan, own_columns, deferred):  # type: ignore[override]
        needs_grad = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        flat = block.detach().reshape(-1)
        rows, width = block.shape
        nodes, degree = plan.nodes, plan.degree
        moments = torch.zeros(nodes + 1, degree + 1, dtype=torch.float64, device=flat.device)
        grad_block = torch.empty_like(flat) if needs_grad else None
        loss_exact = torch.zeros((), dtype=torch.float64, device=flat.device)
        pos_exact = torch.zeros_like(plan.positives)
        own = torch.arange(rows, device=flat.device) * width + own_columns
        chunk = CPU_CHUNK if flat.device.type == "cpu" else GPU_CHUNK  # as pair_passes counts
        grad_cols = plan.grad_table.T.contiguous()  # [D+1, nodes+1]
        if plan.windowed:  # the scores off the grid's pages: from the sorted positives (:class:`Tails`)
            tail_sums = plan.tails.start()
            is_own = torch.zeros(flat.numel(), dtype=torch.bool, device=flat.device)
            is_own[own] = True  # the rows' own positives count for nothing on the tails
        for begin in range(0, flat.numel(), chunk):
            x = flat[begin : begin + chunk]
            if nodes == 0:  # no page on the grid: every score on the tails (one host read: the near runs' size)
                skip = is_own[begin : begin + chunk]
                loss_c, g_neg = plan.tails.add(x.to(torch.float64), tail_sums, needs_grad, skip)
                loss_exact += loss_c
                if needs_grad:
                    grad_block[begin : begin + chunk] = g_neg
                continue
            node, u = _locate(x, plan)
            on_grid = None
            if plan.windowed:  # the pass's one host read: how many scores are off the pages, and their near runs
                outside = (node < 0) | (node > nodes - 1)
                skip = is_own[begin : begin + chunk]
                near = plan.tails.near_counts(x, outside & ~skip)
                n_out, n_near, n_pairs = torch.cat([outside.sum().unsqueeze(0), near]).tolist()
                if n_out == x.numel():
                    loss_c, g_neg = plan.tails.add(x.to(torch.float64), tail_sums, needs_grad, skip, (n_near, n_pairs))
                    loss_exact += loss_c
                    if needs_grad:
                        grad_block[begin : begin + chunk] = g_neg
                    continue
                if n_out:
                    order = stable_partition(outside, n_out)
                    out_idx, on_grid = order[:n_out], order[n_out:]
                    x_out = x.index_select(0, out_idx).to(torch.float64)
                    loss_c, g_neg = plan.tails.add(
                        x_out, tail_sums, needs_grad, skip.index_select(0, out_idx), (n_near, n_pairs)
                    )
                    loss_exact += loss_c
                    if needs_grad:
                        grad_block[begin + out_idx] = g_neg.to(flat.dtype)
                    node, u = node[on_grid], u[on_grid]
            index = node.to(_index_dtype(flat))
            v = u.to(torch.float64) * plan.alpha
            _deposit(moments[:, 0], index, None, nodes + 1)
            power = v
            for m in range(1, degree + 1):
                _deposit(moments[:, m], index, power, nodes + 1)
                if m < degree:
                    power = power * v
            if needs_grad:
                v_g = v.to(flat.dtype)
                g = grad_cols[degree].index_select(0, index)
                for m in range(degree - 1, -1, -1):
                    g = torch.addcmul(grad_cols[m].index_select(0, index), g, v_g)
                if on_grid is None:
                    grad_block[begin : begin + chunk] = g
                else:
                    grad_block[begin + on_grid] = g
        if plan.windowed:
            loss_c, g_pos = plan.tails.finish(tail_sums, needs_grad)
            loss_exact += loss_c
            if needs_grad:
                pos_exact += g_pos
        # the rows' own positives are no negatives: take their moments out again and zero their gradient
        node, u = _locate(flat[own], plan)
        outside = (node < 0) | (node > nodes - 1)
        index = node.masked_fill(outside, nodes).to(_index_dtype(flat))
        v = u.masked_fill(outside, 0.0).to(torch.float64) * plan.alpha
        power = -torch.ones_like(v)
        for m in range(degree + 1):
            _deposit(moments[:, m], index, power, nodes + 1)
            power = power * v
        moments = moments[:nodes]
        loss = (plan.loss_table[:nodes] * moments).sum() + loss_exact
        ctx.deferred, ctx.plan, ctx.shape = deferred, plan, block.shape
        if needs_grad:
            grad_block[own] = 0
            ctx.moments, ctx.pos_exact = moments, pos_exact
            ctx.save_for_backward(grad_block)
        return loss.to(block.dtype)

    @staticmethod
    def backward(ctx, grad_output):  # type: ignore[override]
        (grad_block,) = ctx.saved_tensors
        plan: GridPlan = ctx.plan
        g = grad_output.detach().to(torch.float64)
        grad_pos = None
        if ctx.deferred:
            plan.moments += ctx.moments * g
            plan.exact_positive_grad = plan.exact_positive_grad + ctx.pos_exact * g
        elif ctx.needs_input_grad[0]:
            grad_pos = ((plan.positive_grad(ctx.moments) + ctx.pos_exact) * g).to(grad_output.dtype)
        grad_in = (grad_block * grad_output).view(ctx.shape) if ctx.needs_input_grad[1] else None
        return grad_pos, grad_in, None, None, None


def pair_sums(
    pos: Tensor, neg: Tensor, inv_tau: float, chunk_pairs: int, needs_grad: bool = True
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """Every pair, ``chunk_pairs`` at a time: ``(Σ_i Σ_k softplus((neg_k − pos_i)·inv_tau)`` as float64, its
    gradients ``−inv_tau Σ_k σ(·)`` per positive and ``+inv_tau Σ_i σ(·)`` per negative``)``, in the inputs' dtype
    (None without ``needs_grad``). The pairwise pair stage, and the grid's scores outside its window."""
    step = max(1, chunk_pairs // max(pos.numel(), 1))
    total = torch.zeros((), dtype=torch.float64, device=pos.device)
    grad_pos = torch.zeros_like(pos) if needs_grad else None
    grad_neg = torch.empty_like(neg) if needs_grad else None
    pos_col = pos.unsqueeze(1)
    for begin in range(0, neg.numel(), step):
        z = neg[begin : begin + step].unsqueeze(0) - pos_col  # [P, c]
        z.mul_(inv_tau)
        total += torch.nn.functional.softplus(z).sum(dtype=torch.float64)
        if needs_grad:
            z.sigmoid_()
            grad_pos.sub_(z.sum(dim=1), alpha=inv_tau)
            grad_neg[begin : begin + step] = z.sum(dim=0).mul_(inv_tau)
    return total, grad_pos, grad_neg


def plan_for_range(positives: Tensor, inv_tau: float, lo: float, hi: float, n_scores: int, sample: Tensor) -> GridPlan:
    """The grid for scores in ``[lo, hi]`` (``n_scores`` of them, compared with ``positives``): the cheapest layout
    by the cost model, either a level over the whole range (nodes one past each end), or, for ranges wider than the
    finest level's :data:`MAX_NODES` nodes, pages of one level (:data:`PAGE_LEVELS`) where a sample of the scores
    (``sample``, a block of them) says the grid is cheaper than the tails (:func:`_pages`), every other score summed by
    :class:`Tails` from the sorted positives."""
    dtype = torch.float64 if sample.dtype == torch.float64 else torch.float32
    options = []  # (cost, level, lo_node, hi_node)
    for index, (alpha_max, degree) in enumerate(LEVELS):
        h = _spacing(inv_tau, alpha_max)
        lo_node, hi_node = _first_node(math.floor(lo / h) - 1), math.ceil(hi / h) + 1
        nodes = hi_node - lo_node + 1
        if nodes <= MAX_NODES:
            cost = n_scores * _neg_ns(degree) + positives.numel() * nodes * _pos_ns(degree)
            options.append((cost, index, lo_node, hi_node))
    paged = None
    if (hi - lo) * inv_tau > PAGES_FROM or not options:
        tails = Tails(positives, inv_tau, lo, hi)
        layouts = []
        for index in PAGE_LEVELS:
            plan = make_plan(positives, inv_tau, index)
            plan.tails = tails
            layouts.append((plan, *_pages(plan, n_scores, sample)))
        # the paged layout's one host read: every level's cost, number of pages, first and last page
        facts = torch.stack([f for _, _, f in layouts]).tolist()
        for (plan, keys, _), (cost, count, first, last) in zip(layouts, facts):
            if paged is None or cost < paged[0]:
                paged = (cost, plan, (keys[: int(count)], first, last))
    deep_tail = (hi - lo) * inv_tau + 2 * LEVELS[-1][0] > 690  # the positives lie in [lo, hi] too
    if paged is not None and (not options or paged[0] < min(options)[0]):
        _, plan, pages = paged
        plan.deep_tail = deep_tail
        plan.windowed = True
        plan.wide = max(abs(lo), abs(hi)) / plan.h >= 2**22 and dtype != torch.float64
        plan.build_pages(*pages, PAGE_NODES, dtype)
    else:
        _, index, lo_node, hi_node = min(options)
        plan = make_plan(positives, inv_tau, index)
        plan.deep_tail = deep_tail
        plan.wide = max(abs(lo_node), abs(hi_node)) >= 2**22 and dtype != torch.float64
        plan.build(lo_node, hi_node, dtype)
    return plan


def pair_passes(n_scores: int, device: torch.device) -> int:
    """The passes :func:`grid_pair_sum` makes over a block of ``n_scores`` scores (a paged grid reads once a pass)."""
    return max(1, -(-n_scores // (CPU_CHUNK if device.type == "cpu" else GPU_CHUNK)))


def _neg_ns(degree: int) -> float:
    return NEG_NS[0] + NEG_NS[1] * (degree + 1)


def _pos_ns(degree: int) -> float:
    return POS_NS[0] + POS_NS[1] * (degree + 2)


def _first_node(node: int) -> int:
    """The largest integer ≤ ``node`` that float64 holds exactly (node numbers past 2^53: scores past ~1e14 τ)."""
    as_float = float(node)
    if as_float > node:
        as_float = math.nextafter(as_float, -math.inf)
    return int(as_float)


def _pages(plan: GridPlan, n_scores: int, sample: Tensor) -> tuple[Tensor, Tensor]:
    """The pages (of :data:`PAGE_NODES` nodes at the plan's level) worth a grid, and the layout's estimated cost
    in ns: from a strided sample of the scores, each page's share of the scores and the positives within reach of
    it; a page goes on the grid when its scores would cost more on the tails (:data:`TAIL_NS` a score and
    :data:`NEAR_NS` a pair of its near run) than on the grid (its scores' deposits and its B × page tables). This
    bounds the pairs evaluated one by one: a page full of scores among many positives is on the grid. The pages
    span at most :data:`MAX_PAGE_SPAN` page numbers (around the costliest).

    Computed on the device without a host read: ``(keys, facts)`` with ``keys`` the chosen pages first (ascending,
    then +inf) and ``facts`` = [cost, number chosen, first, last chosen page] (float64), which
    :func:`plan_for_range` reads for every level at once."""
    flat = sample.detach().reshape(-1)
    picks = flat[:: max(1, flat.numel() // PAGE_SAMPLE)].to(torch.float64)
    size, degree = PAGE_NODES, plan.degree
    page, _ = torch.sort(torch.floor(torch.round(picks / plan.h) / size))
    # the distinct pages by runs of the sorted sample (``torch.unique`` would wait for the device): slot r holds run r
    starts = torch.ones_like(page, dtype=torch.bool)
    starts[1:] = page[1:] != page[:-1]
    run = torch.cumsum(starts, 0) - 1
    counts = torch.zeros_like(page).index_add_(0, run, torch.ones_like(page))
    pages = torch.zeros_like(page).index_put_((run,), page)
    valid = counts > 0  # slots past the last run hold nothing
    share = counts * (n_scores / picks.numel())
    reach = TAIL_Z / plan.inv_tau
    ps = plan.tails.sorted
    near = torch.searchsorted(ps, (pages + 1) * size * plan.h + reach, right=True)
    near -= torch.searchsorted(ps, pages * size * plan.h - reach)
    on_tails = share * (TAIL_NS + near.to(torch.float64) * NEAR_NS)
    on_grid = share * _neg_ns(degree) + ps.numel() * size * _pos_ns(degree)
    chosen = (on_grid < on_tails) & valid
    # by index_select: a 0-dim tensor as an index may be read on the host; none chosen: chosen stays all False
    heaviest = pages.index_select(0, torch.argmax(torch.where(chosen, on_tails, -1.0)).reshape(1))
    chosen &= (pages - heaviest).abs() < MAX_PAGE_SPAN // 2
    cost = torch.where(valid, torch.where(chosen, on_grid, on_tails), 0.0).sum()
    keys, _ = torch.sort(torch.where(chosen, pages, torch.inf))
    n_chosen = chosen.sum()
    last = keys.index_select(0, (n_chosen - 1).clamp_min(0).reshape(1))
    return keys, torch.cat([torch.stack([cost, n_chosen.to(torch.float64), keys[0]]), last])


def grid_pair_sum(
    positives: Tensor,
    block: Tensor,
    own_columns: Tensor,
    inv_tau: float,
    plan: GridPlan | None = None,
    defer_positive_grad: bool = False,
) -> Tensor:
    """Σ over every positive ``p_i`` and every entry ``n`` of ``block`` (``[rows, M]``) except row r's own positive
    (column ``own_columns[r]``) of ``softplus((n − p_i)·inv_tau)``: the pair sum of
    :func:`~st_magnitude.losses.mw.pairwise_softplus_sum` on the block with −∞ on the own positives, in O(N + B·G).

    Without ``plan``, one is made for this block (one host read: its score range). A ``plan`` made by
    :func:`plan_for_range` for the range of several blocks (a cached step's chunks) costs no read per block. The
    positives' gradient flows back as usual, unless ``defer_positive_grad``: then each block's backward only
    accumulates its moments in the plan, and the caller back-propagates :meth:`GridPlan.deferred_positive_grad`
    once, after the last block (one B × G pass instead of one per block).
    """
    deferred = defer_positive_grad
    if deferred and plan is None:
        raise ValueError("grid_pair_sum: defer_positive_grad needs a plan shared by the blocks (plan_for_range)")
    if plan is None:
        lo, hi = score_range(block, positives)
        plan = plan_for_range(positives, inv_tau, lo, hi, block.numel(), block)
    return _GridPairs.apply(positives, block, plan, own_columns, deferred)
