"""MW (Mann–Whitney) loss of paper 001 (eq. 3), plain and cached (GradCache), with any similarity of the family.

Paper 001 eq. 3 (batch form), with the temperature of Lemma 2 / §5.1::

    L_MW = −(1/B) Σ_{i=1..B} Σ_{s_k⁻ ∈ S⁻} log σ((s_i⁺ − s_k⁻)/τ) = (1/B) Σ_i Σ_k softplus((s_k⁻ − s_i⁺)/τ)

``s_i⁺`` are the B diagonal scores s(q_i, p_i⁺); ``S⁻`` is *every other entry* of the B × B(1+H) score matrix (each
query against every passage of the batch except its own positive), pooled across queries, so
``|S⁻| = B(HB + B − 1)`` and there are ``B·|S⁻|`` pairs: O(B³). Two exact pair stages compute the same sum:

- ``"pairwise"``: every pair, in chunks of ``chunk_size`` pairs, by a custom autograd function that keeps only the
  scores' gradients (the fastest exact path for small batches, and the tests' reference);
- ``"grid"``: O(B² + B·G) via node tables and Taylor moments on a power-of-two grid (:mod:`._mw_grid`), exact to
  ~1e-9 — what makes large batches (and so :class:`CachedMWLoss`) affordable.

``pair_stage="auto"`` picks by measured cost (:func:`choose_pair_stage`).
"""

from __future__ import annotations

import logging
import math
from typing import Any, Literal

import torch
from torch import Tensor, nn

from st_magnitude.losses._batch import GatheredBatch
from st_magnitude.losses._common import CachedLoss, FamilyLoss, at_least_fp32
from st_magnitude.losses._mw_grid import grid_pair_sum, pair_passes, pair_sums, plan_for_range
from st_magnitude.losses._stats import BatchStats, correctly_ordered_pairs
from st_magnitude.losses._temperature import (
    LearnableScale,
    parse_temperature,
    scale_value,
    temperature_config,
)
from st_magnitude.similarity import Similarity

logger = logging.getLogger(__name__)

__all__ = [
    "MWLoss",
    "CachedMWLoss",
    "pairwise_softplus_sum",
    "choose_pair_stage",
    "MW_CITATION",
    "MW_REDUCTIONS",
    "MW_PAIR_STAGES",
]

MW_REDUCTIONS = ("paper", "mean")
MW_PAIR_STAGES = ("auto", "grid", "pairwise")
DEFAULT_CHUNK_SIZE = 2**20
#: smallest automatic pair chunk: below this the Python loop overhead dominates
MIN_AUTO_CHUNK = 2**14
#: on the CPU, ``"auto"`` sums every pair up to this many pairs (one chunk, in cache) and uses the grid above: on one
#: thread the pairwise sum is faster at B = 64 without hard negatives (2¹⁸ pairs: 1.3 ms vs the grid's 1.6 ms) and
#: slower from B = 64 with one (2¹⁹ pairs: 1.8 vs 1.7 ms) on (``python benchmarks/bench_mw_pairs.py``, the table in
#: docs/mw_loss.md)
CPU_PAIRWISE_MAX_PAIRS = 2**18
#: on a GPU the pairwise sum is one kernel per op over all pairs: ``"auto"`` keeps it up to this many pairs when
#: they fit in half the free memory (about 16 bytes a pair); not measured on a GPU yet
GPU_PAIRWISE_MAX_PAIRS = 2**27

MW_CITATION = """
@misc{sheikholeslami2025optimizingwhatmatters,
    title={Optimizing What Matters: AUC-Driven Learning for Robust Neural Retrieval},
    author={Sheikholeslami and Hosseini and Bechard and Daruru and Rajeswar},
    year={2025},
    eprint={2510.00137},
    archivePrefix={arXiv},
    primaryClass={cs.IR}
}
"""


class _PairwiseSoftplusSum(torch.autograd.Function):
    """Σ_i Σ_k softplus((neg_k − pos_i) · inv_tau), evaluated in chunks; gradients computed in the same pass.

     d/d pos_i = −inv_tau Σ_k σ((neg_k − pos_i)·inv_tau),  d/d neg_k = +inv_tau Σ_i σ((neg_k − pos_i)·inv_tau)
    . Only ``pos``/``neg``-sized tensors are kept for backward.
    """

    @staticmethod
    def forward(ctx, pos: Tensor, neg: Tensor, inv_tau: float, chunk_size: int) -> Tensor:  # type: ignore[override]
        needs_grad = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        total, grad_pos, grad_neg = pair_sums(pos, neg, inv_tau, chunk_size, needs_grad)
        ctx.save_for_backward(grad_pos, grad_neg)
        return total.to(pos.dtype)

    @staticmethod
    def backward(ctx, grad_output: Tensor):  # type: ignore[override]
        grad_pos, grad_neg = ctx.saved_tensors
        return grad_output * grad_pos, grad_output * grad_neg, None, None


def pairwise_softplus_sum(
    pos: Tensor, neg: Tensor, temperature: float, chunk_size: int = DEFAULT_CHUNK_SIZE
) -> Tensor:
    """``Σ_i Σ_k softplus((neg_k − pos_i)/τ) = −Σ_i Σ_k log σ((pos_i − neg_k)/τ)`` over all (positive, negative)
    pairs, in float32, never holding more than ``chunk_size`` pairs at once (paper 001 eq. 3 without the 1/B)."""
    pos = at_least_fp32(pos.reshape(-1))
    neg = at_least_fp32(neg.reshape(-1)).to(pos.dtype)
    return _PairwiseSoftplusSum.apply(pos, neg, 1.0 / float(temperature), int(chunk_size))


def mw_negatives(
    similarity: Similarity, query_rows: Tensor, docs_all: Tensor, positive_columns: Tensor, scale: Tensor | None = None
) -> Tensor:
    """Rows of the score matrix s(q_i, ·), flattened, with each row's own positive set to −∞ (a part of S⁻).

    With ``scale`` (a learnable 1/τ) the scores are multiplied by it *before* the −∞ is written, so its gradient
    ``Σ ∂L/∂(scale·s) · s`` never meets ``0 · (−∞)``.

    A −∞ entry contributes exactly 0 to the pair sum and its gradient (softplus(−∞) = σ(−∞) = 0), so the block is
    used as a view, without copying the negatives out of it.
    """
    scores = at_least_fp32(similarity(query_rows, docs_all))  # [r, M]
    if scale is not None:
        scores = scores * scale
    return _mask_own(scores, positive_columns)


def _mask_own(scores: Tensor, positive_columns: Tensor) -> Tensor:
    """``scores`` (``[r, M]``) with row r's own positive set to −∞ in place, flattened (see :func:`mw_negatives`)."""
    scores[torch.arange(scores.size(0), device=scores.device), positive_columns] = -torch.inf
    return scores.reshape(-1)


def _pairwise_chunk(chunk_size: int | None, pairs: int, score_elements: int, device: torch.device) -> int:
    """``chunk_size=None``: on a GPU as many pairs as fit in half the free memory (~32 bytes a pair with the
    buffers); on the CPU every pair of a small batch in one chunk (up to :data:`CPU_PAIRWISE_MAX_PAIRS`), else half
    as many pairs as the score block the loss holds anyway (at least ``MIN_AUTO_CHUNK``)."""
    if chunk_size is not None:
        return chunk_size
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return max(MIN_AUTO_CHUNK, min(pairs, free // 64))
    return max(MIN_AUTO_CHUNK, min(pairs, CPU_PAIRWISE_MAX_PAIRS), score_elements // 2)


def choose_pair_stage(requested: str, positives: int, scores: int, device: torch.device) -> str:
    """``"grid"`` or ``"pairwise"`` for ``positives`` × ``scores`` pairs: ``requested`` unless it is ``"auto"``;
    then the pairwise sum while it is the cheaper exact path (:data:`CPU_PAIRWISE_MAX_PAIRS`,
    :data:`GPU_PAIRWISE_MAX_PAIRS`), the grid above. Decided from shapes alone (no host read)."""
    if requested != "auto":
        return requested
    pairs = positives * scores
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return "pairwise" if pairs <= GPU_PAIRWISE_MAX_PAIRS and pairs * 16 <= free // 2 else "grid"
    return "pairwise" if pairs <= CPU_PAIRWISE_MAX_PAIRS else "grid"


def _check_choice(name: str, value: Any, allowed: tuple[str, ...]) -> str:
    if not (isinstance(value, str) and value in allowed):
        raise ValueError(f"{name} must be one of {list(allowed)}, got {value!r}")
    return value


def _check_chunk_size(chunk_size: Any) -> int | None:
    # bool is an int subclass: chunk_size=True would silently mean one pair per chunk
    if chunk_size is not None and not (
        isinstance(chunk_size, int) and not isinstance(chunk_size, bool) and chunk_size > 0
    ):
        raise ValueError(
            f"chunk_size must be None (automatic) or a positive int (pairs per chunk), got {chunk_size!r}"
        )
    return chunk_size


def _check_mw_args(reduction: str, chunk_size: int | None, pair_stage: str = "auto") -> None:
    _check_choice("reduction", reduction, MW_REDUCTIONS)
    _check_choice("pair_stage", pair_stage, MW_PAIR_STAGES)
    _check_chunk_size(chunk_size)


def _normaliser(reduction: str, world_batch: int, n_docs: int, world: int) -> float:
    """Factor turning the pair sum into the loss. Under gathering each process sums its own rows' negatives against
    all positives, so the factor carries ``world``: the mean over processes (what DDP averages) is the full loss."""
    n_negatives = world_batch * n_docs - world_batch  # |S⁻| = B(HB + B − 1)
    if reduction == "paper":
        return world / world_batch
    return world / (world_batch * n_negatives)


class MWLoss(BatchStats, FamilyLoss):
    def __init__(
        self,
        model: nn.Module,
        similarity: str | Similarity | None = None,
        temperature: float | str = 0.01,
        reduction: Literal["paper", "mean"] = "paper",
        chunk_size: int | None = None,
        pair_stage: Literal["auto", "grid", "pairwise"] = "auto",
        gather_across_devices: bool = False,
    ) -> None:
        """The Mann–Whitney (MW) loss of paper 001 (eq. 3): a pairwise logistic surrogate of the *pooled* AUC.
        Every positive score of the batch is compared with every negative score of the batch, across queries::

            L = (1/B) Σ_i Σ_{s_k⁻ ∈ S⁻} softplus((s_k⁻ − s_i⁺)/τ)

        where ``s_i⁺ = s(q_i, p_i⁺)`` are the B diagonal scores and ``S⁻`` holds every other entry of the
        B × B(1+H) score matrix (in-batch and hard negatives of *all* queries). Unlike InfoNCE it is not invariant
        to a per-query score shift, so it calibrates scores across queries; ``AoC ≤ L_MW(mean)/log 2`` (Lemma 2).
        Scores come from any member of the similarity family; on a model converted with
        ``st_magnitude.apply_similarity`` the carried similarity is used (same rules as
        :class:`~st_magnitude.losses.PartialNormInfoNCELoss`).

        Args:
            model: a SentenceTransformer (plain, or converted by ``st_magnitude.apply_similarity``).
            similarity: ``"cosine"`` (the paper), ``"dot"``, ``"qnorm"``, ``"dnorm"``, ``"learnable"``, a
                ``Similarity``, or ``None`` (the default of every contrastive loss here): what the model serves — the
                similarity a converted model carries, else a plain model's ``similarity_fn_name`` (cosine or dot).
            temperature: τ (paper 001 §5.1: 0.01, i.e. a scale of 100 on cosine scores). Scores are divided by τ.
                ``"learnable"``: a CLIP-style log-parameterised τ held by the loss (parameter
                ``temperature.log_scale`` = log 1/τ), starting at 0.01 and clamped to τ ≥ 0.01, so it can only
                grow (see ``docs/temperature.md``).
            reduction: ``"paper"``: Σ over pairs / B, as eq. 3 is written (large: ≈ |S⁻|·log 2 at start);
                ``"mean"``: mean over the B·|S⁻| pairs (the expectation of Lemma 2).
            chunk_size: (positive, negative) pairs evaluated at once by the ``"pairwise"`` pair stage; it holds
                about 32–36 bytes per pair with its autograd buffers (measured, docs/benchmarks.md), so ``2**20``
                costs ≈ 34 MiB. ``None`` (default): on a GPU as many as fit in half the free memory, on the CPU a
                small batch's pairs at once and otherwise half the size of the B × B(1+H) score matrix. Does not
                change the result.
            pair_stage: how the B·|S⁻| pairs are summed, with the same result: ``"pairwise"`` (every pair, O(B³)),
                ``"grid"`` (node tables and Taylor moments on a power-of-two grid, O(B² + B·G), exact to ~1e-9; see
                ``docs/mw_loss.md``) or ``"auto"`` (default): the pairwise sum for small batches, where it is
                faster, the grid above (:func:`choose_pair_stage`). Either reads the score range on the host once
                per step, and refuses non-finite scores (or a range that overflows once divided by τ) in one
                ``ValueError`` naming the similarity and the temperature.
            gather_across_devices: gather embeddings from all processes (with gradients); each process then
                compares every positive with its own anchors' negatives, and the mean over processes is the loss of
                the full global batch.

        References:
            - Sheikholeslami et al. 2025, "Optimizing What Matters: AUC-Driven Learning for Robust Neural
              Retrieval" (arXiv 2510.00137), eqs. 2–3, Lemmas 1–2.

        Requirements:
            1. (anchor, positive) pairs or (anchor, positive, negative_1, ..., negative_n) tuples (paper: H = 5).
            2. At least one negative: batch size ≥ 2, or hard-negative columns.

        Inputs:
            +-------------------------------------------------+--------+
            | Inputs                                          | Labels |
            +=================================================+========+
            | (anchor, positive) pairs                        | none   |
            +-------------------------------------------------+--------+
            | (anchor, positive, negative_1, ..., negative_n) | none   |
            +-------------------------------------------------+--------+

        Recommendations:
            - ``batch_sampler=BatchSamplers.NO_DUPLICATES``: the paper masks nothing, so a duplicated positive is a
              negative of the other query (the loss logs a warning the first time it sees one).
            - With ``reduction="paper"`` the loss is in the thousands; gradient clipping (``max_grad_norm=1``) is
              then active on every step. ``"mean"`` keeps it O(1).
            - Log what it optimises with ``callbacks=[LossStatsCallback(loss)]``
              (:class:`~st_magnitude.callbacks.LossStatsCallback`): each training log then holds ``mw_auc``, the
              batch's exact in-batch AUC (correctly ordered (positive, negative) pairs, ties ½), and
              ``mw_loss_per_pair``, the mean loss per pair (log 2 at chance), averaged over the logging interval and
              comparable across batch sizes and reductions; kept on the device until logged.

        Relations:
            - :class:`CachedMWLoss`: same loss and gradients with GradCache.
            - :class:`~st_magnitude.losses.PartialNormInfoNCELoss` / ST's ``MultipleNegativesRankingLoss``
              (scale = 1/τ) is the contrastive baseline of paper 001.

        Example:
            ::

                from datasets import Dataset
                from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
                from st_magnitude.losses import MWLoss

                model = SentenceTransformer("all-MiniLM-L6-v2")
                train_dataset = Dataset.from_dict({
                    "anchor": ["what lowers blood sugar?", "is coffee bad for sleep?"],
                    "positive": ["Fiber slows sugar uptake.", "Caffeine delays sleep onset."],
                })
                trainer = SentenceTransformerTrainer(model=model, train_dataset=train_dataset, loss=MWLoss(model))
                trainer.train()
        """
        temperature = parse_temperature(temperature, default=0.01)
        _check_mw_args(reduction, chunk_size, pair_stage)
        super().__init__(model, similarity, gather_across_devices)
        self.temperature: float | LearnableScale = temperature
        self.reduction = reduction
        self.chunk_size = chunk_size
        self.pair_stage = pair_stage

    @property
    def host_reads_per_step(self) -> int:
        """Host reads of the latest step (1 before the first): one on both pair stages, the range of the step's
        scores (all of a cached step's chunks at once), which refuses non-finite scores and sizes the grid. A paged
        grid (a range thousands of τ wide: dot, qnorm or dnorm scores, cosine at τ = 1e-6) adds one to plan its
        pages and one per pass over each chunk's scores (the count of scores off the pages and of their near pairs,
        which size the pass): ``2 + passes``, a pass being at most ``GPU_CHUNK`` (2^24) scores of one chunk on an
        accelerator (``CPU_CHUNK`` on the CPU), so one per chunk below that."""
        return self.__dict__.get("_host_reads", 1)

    stats_prefix = "mw_"
    #: the in-batch AUC costs two binary searches per score: computed (on training steps, under
    #: autograd) once a :class:`~st_magnitude.callbacks.LossStatsCallback` is attached, or when set to True
    record_stats = False

    # the settings are checked when assigned too (``loss.pair_stage = "gird"`` is refused, not ignored)
    @property
    def reduction(self) -> str:
        return self.__dict__["_reduction"]

    @reduction.setter
    def reduction(self, value: str) -> None:
        self.__dict__["_reduction"] = _check_choice("reduction", value, MW_REDUCTIONS)

    @property
    def pair_stage(self) -> str:
        return self.__dict__["_pair_stage"]

    @pair_stage.setter
    def pair_stage(self, value: str) -> None:
        self.__dict__["_pair_stage"] = _check_choice("pair_stage", value, MW_PAIR_STAGES)

    @property
    def chunk_size(self) -> int | None:
        return self.__dict__["_chunk_size"]

    @chunk_size.setter
    def chunk_size(self, value: int | None) -> None:
        self.__dict__["_chunk_size"] = _check_chunk_size(value)

    def prepare_batch(self, columns: list[Tensor], rows_per_chunk: int, detach_shared: bool = False) -> GatheredBatch:
        """Also score the B_world positives s_i⁺ once (every chunk compares its negatives with all of them), choose
        the pair stage, fix the pair-chunk size and the normalising factor, and read the range of the step's
        scores (one host read for all its chunks), which refuses non-finite scores on both stages and gives the
        grid stage one grid for the whole step. A step of one chunk keeps its score block for :meth:`rows_loss`."""
        batch = super().prepare_batch(columns, rows_per_chunk)
        positives = at_least_fp32(self.similarity_fct.pairwise(batch.queries, batch.docs[0]))
        n_docs = batch.docs_all.size(0)
        stage = choose_pair_stage(self.pair_stage, positives.numel(), batch.size * n_docs, positives.device)
        batch.extra.update(
            positives=positives,
            positives_input=positives.detach().requires_grad_() if detach_shared else positives,
            stage=stage,
            pair_chunk=_pairwise_chunk(
                self.chunk_size, positives.numel() * rows_per_chunk * n_docs, rows_per_chunk * n_docs, positives.device
            ),
            factor=_normaliser(self.reduction, batch.queries.size(0), n_docs, batch.world),
            plan=None,
            defer=detach_shared,  # the cached backward: the positives' grid share goes back once, in finish_batch
            stats=self.record_stats and torch.is_grad_enabled(),
            ordered=0,  # twice the Mann–Whitney U of the chunks so far (device int64)
            pair_sum=0.0,  # the chunks' pair sums so far (device, detached)
        )
        scale, inv_tau = self._inv_tau()
        scaled = positives.detach() if scale is None else positives.detach() * scale
        ends, first = [], None
        for begin in range(0, batch.size, rows_per_chunk):
            local = batch.local_rows(begin, min(begin + rows_per_chunk, batch.size))
            if rows_per_chunk >= batch.size:  # one chunk: score it once, with autograd, for rows_loss
                block = batch.extra["block"] = self._block(batch, local, scale)
            else:  # several: scored again in rows_loss, as they will be scored there (same rows, same numbers)
                with torch.no_grad():
                    block = self._block(batch, local, scale)
            first = block.detach() if first is None else first
            ends.extend(torch.aminmax(block.detach()))
        pairs = positives.numel() * batch.size * n_docs
        lo, hi = self._checked_range(torch.stack([*ends, *torch.aminmax(scaled)]), inv_tau, pairs)
        reads = 1
        if stage == "grid":
            plan = batch.extra["plan"] = plan_for_range(scaled, inv_tau, lo, hi, batch.size * n_docs, first)
            if plan.windowed:  # planning the pages, then one read per pass of each chunk
                chunks = [min(rows_per_chunk, batch.size - b) * n_docs for b in range(0, batch.size, rows_per_chunk)]
                reads = 2 + sum(pair_passes(n, positives.device) for n in chunks)
        self.__dict__["_host_reads"] = reads
        return batch

    def _checked_range(self, ends: Tensor, inv_tau: float, pairs: int) -> tuple[float, float]:
        """``(min, max)`` of the step's scaled scores, in the step's one host read; refuses scores that are not
        finite, or so far apart that the pair sum could overflow (each of the ``pairs`` terms is at most
        ``(max − min)/τ + log 2``), before either pair stage sees them."""
        lo, hi = ends.to(torch.float64).aminmax()
        lo, hi = torch.stack([lo, hi]).tolist()
        bound = ((hi - lo) * inv_tau + 1.0) * pairs if math.isfinite(hi - lo) else math.inf
        if not bound <= torch.finfo(ends.dtype).max:
            if isinstance(self.temperature, LearnableScale):
                tau = f"'learnable' (now {1 / scale_value(self.temperature):.3g})"
            else:
                tau = f"{self.temperature:g}"
            raise ValueError(
                f"{type(self).__name__}: the scores (similarity {self.similarity_name!r}, temperature {tau}) span "
                f"[{lo:.6g}, {hi:.6g}], which is not finite or overflows {ends.dtype} once divided by the "
                f"temperature and summed over {pairs} pairs, so the loss would be NaN or inf: the embeddings' norms "
                "are too large for this similarity (cosine bounds the scores; check the model's outputs for a "
                "diverged step or fp16 overflow)"
            )
        return lo, hi

    def _inv_tau(self) -> tuple[Tensor | None, float]:
        """``(scale, inv_tau)``: a learnable 1/τ scales the scores before the pair stage (which then runs at τ = 1,
        so 1/τ gets its gradient through the scores); a fixed τ is passed as a number."""
        if isinstance(self.temperature, LearnableScale):
            return self.temperature(), 1.0
        return None, 1.0 / self.temperature

    def _block(self, batch: GatheredBatch, local: Tensor, scale: Tensor | None) -> Tensor:
        scores = at_least_fp32(self.similarity_fct(batch.queries[local], batch.docs_all))
        return scores if scale is None else scores * scale

    def rows_loss(self, batch: GatheredBatch, begin: int, end: int) -> Tensor:
        """The pairs of this process's anchors ``begin:end``: their negatives against every positive of the batch."""
        local = batch.local_rows(begin, end)
        positives = batch.extra["positives_input"]
        scale, inv_tau = self._inv_tau()  # (s⁻ − s⁺)/τ = s⁻·(1/τ) − s⁺·(1/τ): a learnable 1/τ gets its gradient
        if scale is not None:
            positives = positives * scale
        block = batch.extra.pop("block", None)  # a step of one chunk scored it in prepare_batch
        if block is None:
            block = self._block(batch, local, scale)
        if batch.extra["stats"]:
            batch.extra["ordered"] = batch.extra["ordered"] + correctly_ordered_pairs(positives, block, local)
        if batch.extra["stage"] == "grid":
            pairs = grid_pair_sum(positives, block, local, inv_tau, batch.extra["plan"], batch.extra["defer"])
        else:
            negatives = _mask_own(block, local)
            pairs = pairwise_softplus_sum(positives, negatives, 1.0 / inv_tau, batch.extra["pair_chunk"])
        if batch.extra["stats"]:
            batch.extra["pair_sum"] = batch.extra["pair_sum"] + pairs.detach().double()
            if end == batch.size:  # the step's last chunk
                self._record_batch_stats(batch, positives.numel())
        return pairs * batch.extra["factor"]

    def _record_batch_stats(self, batch: GatheredBatch, n_positives: int) -> None:
        """The step's in-batch AUC (correctly ordered (positive, negative) pairs, ties ½) and mean loss per pair,
        over this process's anchors' negatives against every positive; kept on the device until logged."""
        pairs = n_positives * batch.size * (batch.docs_all.size(0) - 1)
        self._record_stats(
            {
                "auc": batch.extra["ordered"].double() / (2 * pairs),
                "loss_per_pair": batch.extra["pair_sum"] / pairs,
            }
        )

    def finish_batch(self, batch: GatheredBatch) -> None:
        """Back-propagate the positives' gradient, accumulated over the chunks, once (with the grid's share, which
        its chunks leave in the plan; through the learnable 1/τ too)."""
        held, positives, plan = batch.extra["positives_input"], batch.extra["positives"], batch.extra["plan"]
        if not batch.extra["defer"]:
            return
        roots, grads = [], []
        if held.grad is not None:
            roots.append(positives)
            grads.append(held.grad)
        if plan is not None:
            scale, _ = self._inv_tau()
            roots.append(positives if scale is None else positives * scale)
            grads.append(plan.deferred_positive_grad().to(positives.dtype))  # the factor is in it already
        if roots:
            torch.autograd.backward(roots, grads)

    @property
    def scale(self) -> float:
        return scale_value(self.temperature) if isinstance(self.temperature, LearnableScale) else 1 / self.temperature

    def get_config_dict(self) -> dict[str, Any]:
        return {
            **self.similarity_config(),
            **temperature_config(self.temperature),
            "reduction": self.reduction,
            "chunk_size": "auto" if self.chunk_size is None else self.chunk_size,
            "pair_stage": self.pair_stage,
            "gather_across_devices": self.gather_across_devices,
        }

    @property
    def citation(self) -> str:
        return MW_CITATION


class CachedMWLoss(CachedLoss):
    _delegated_to_wrapped_loss = (
        "temperature",
        "reduction",
        "chunk_size",
        "similarity_fct",
        "carried",
        "similarity_name",
        "gather_across_devices",
        "scale",
        "pair_stage",
        "record_stats",
        "last_stats",
        "pop_stats",
        "stats_prefix",
    )

    def __init__(
        self,
        model: nn.Module,
        similarity: str | Similarity | None = None,
        temperature: float | str = 0.01,
        reduction: Literal["paper", "mean"] = "paper",
        chunk_size: int | None = None,
        pair_stage: Literal["auto", "grid", "pairwise"] = "auto",
        mini_batch_size: int = 32,
        mini_batch_num_tokens: int | None = None,
        gather_across_devices: bool = False,
        show_progress_bar: bool = False,
    ) -> None:
        """:class:`MWLoss` with gradient caching (GradCache) on ST's ``CachedLossMixin``: the same loss and
        gradients, for effective batches far beyond memory.

        The B × B(1+H) score matrix is built ``mini_batch_size`` rows at a time; each row chunk's negatives are
        compared with all B positives and back-propagated at once; the positives' gradient is accumulated and
        back-propagated last. Peak memory is therefore one row chunk of scores plus the pair stage's buffers
        (a pair chunk, or the grid's tables), independent of B; with the grid pair stage (``pair_stage="auto"``
        above small batches) compute grows as B², like the cached InfoNCE's.

        Like ST's cached losses it wraps an :class:`MWLoss` built from the same arguments (``self.loss``):
        ``temperature``, ``reduction``, ... read and assign through to it, and each row chunk is computed by
        :meth:`MWLoss.rows_loss`.

        Args:
            model: a SentenceTransformer (plain, or converted by ``st_magnitude.apply_similarity``).
            similarity: as in :class:`MWLoss`.
            temperature: τ (paper 001: 0.01) or ``"learnable"`` (as in :class:`MWLoss`; parameter
                ``loss.temperature.log_scale``).
            reduction: ``"paper"`` (Σ/B, eq. 3) or ``"mean"`` (mean over pairs).
            chunk_size: (positive, negative) pairs evaluated at once by the ``"pairwise"`` stage; ``None``
                (default): as in :class:`MWLoss`, with one ``mini_batch_size`` × B(1+H) block as the score block.
            pair_stage: as in :class:`MWLoss`. On the grid, the step's chunks share one grid made from the range of
                all their scores (one host read per step), and the positives' gradient is accumulated over the
                chunks and back-propagated once.
            mini_batch_size: rows per forward pass and per score-matrix chunk.
            mini_batch_num_tokens: pack mini-batches by token count instead (see ST's cached losses).
            gather_across_devices: as in :class:`MWLoss`.
            show_progress_bar: show the mini-batch progress.

        References:
            - Sheikholeslami et al. 2025, "Optimizing What Matters: AUC-Driven Learning for Robust Neural
              Retrieval", eq. 3.
            - Gao et al. 2021, "Scaling Deep Contrastive Learning Batch Size under Memory Limited Setup".

        Requirements:
            1. (anchor, positive) pairs or (anchor, positive, negative_1, ..., negative_n) tuples.

        Inputs:
            +-------------------------------------------------+--------+
            | Inputs                                          | Labels |
            +=================================================+========+
            | (anchor, positive) pairs                        | none   |
            +-------------------------------------------------+--------+
            | (anchor, positive, negative_1, ..., negative_n) | none   |
            +-------------------------------------------------+--------+

        Recommendations:
            - ``batch_sampler=BatchSamplers.NO_DUPLICATES``.

        Relations:
            - Equal (loss and gradients) to :class:`MWLoss`.

        Example:
            ::

                from sentence_transformers import SentenceTransformer
                from st_magnitude.losses import CachedMWLoss

                model = SentenceTransformer("all-MiniLM-L6-v2")
                loss = CachedMWLoss(model, mini_batch_size=32, reduction="mean")  # per_device_train_batch_size=1024
        """
        super().__init__(
            MWLoss(model, similarity, temperature, reduction, chunk_size, pair_stage, gather_across_devices),
            mini_batch_size,
            mini_batch_num_tokens,
            show_progress_bar,
        )
