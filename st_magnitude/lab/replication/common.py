"""Building blocks shared by the claim modules: device, base models, data, training, per-item evaluation.

Everything here drives the package's public API (``apply_similarity``, ``strip_normalize``, the losses, the
evaluators, :mod:`st_magnitude.data`, :mod:`st_magnitude.model`); it only adds the bookkeeping a replication needs:
per-query scores for the paired bootstrap, the same evaluation items in every seed and arm, and the device/precision
choice.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from st_magnitude.data.eval_set import EvalSet
from st_magnitude.data.eval_set import load_eval_set as _load_eval_set
from st_magnitude.data.home import SET_DATA  # the package's one setting

logger = logging.getLogger(__name__)

__all__ = [
    "Context",
    "EvalSet",
    "auc_stat",
    "beir_folder",
    "compact_pools",
    "load_eval_set",
    "pooled_auc_statistic",
    "train",
]


@dataclass
class Context:
    """What a claim's ``run`` gets: the profile settings, the seed, where data lives, the device."""

    profile: str
    settings: dict[str, Any]
    seed: int
    data_dir: Path | None
    device: str
    bf16: bool
    work_dir: Path
    model: str | None = None  # --model override

    def data(self, *parts: str) -> Path:
        if self.data_dir is None:
            raise FileNotFoundError(f"no data folder: {SET_DATA}")
        path = self.data_dir.joinpath(*parts)
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist (data folder {self.data_dir}; {SET_DATA})")
        return path


# ------------------------------------------------------------------------------------------------------------------
# data
# ------------------------------------------------------------------------------------------------------------------
def beir_folder(ctx: Context, name: str) -> Path:
    return ctx.data("beir", name)


def load_eval_set(folder: Path, *, split: str = "test", max_queries=None, max_corpus=None, seed: int = 0) -> EvalSet:
    """A BEIR test set, subsampled NanoBEIR-style with a *fixed* seed so every arm and seed sees the same items."""
    return _load_eval_set(
        folder, split, max_queries=max_queries, max_corpus=max_corpus, seed=seed, judged_queries_only=True
    )


# ------------------------------------------------------------------------------------------------------------------
# training
# ------------------------------------------------------------------------------------------------------------------
def train(
    model,
    loss,
    data: dict[str, list],
    *,
    ctx: Context,
    steps: int,
    batch_size: int,
    learning_rate: float,
    router_mapping: dict[str, str] | None = None,
    learning_rate_mapping: dict[str, float] | None = None,
    warmup_ratio: float = 0.1,
    no_duplicates: bool = True,
    callbacks: list | None = None,
    evaluator=None,
    eval_steps: int | None = None,
    max_grad_norm: float = 1.0,
    batch_sampler=None,
    data_collator=None,
    **extra_args,
) -> dict[str, float]:
    """Train with the lab engine's one Trainer call (:func:`st_magnitude.lab.engine.training.train`) for ``steps``
    steps in a temporary folder under the seed's work folder (no checkpoints); returns loss and wall time.

    ``data`` is a column dict or a ``datasets.Dataset``; ``batch_sampler`` overrides the default sampler choice;
    ``extra_args`` are further Trainer arguments.
    """
    from st_magnitude.lab.engine.training import TrainSpec
    from st_magnitude.lab.engine.training import train as engine_train

    sampler = batch_sampler if batch_sampler is not None else ("no_duplicates" if no_duplicates else "batch_sampler")
    with tempfile.TemporaryDirectory(dir=ctx.work_dir) as tmp:
        spec = TrainSpec(
            output_dir=tmp,
            steps=steps,
            batch_size=batch_size,
            learning_rate=learning_rate,
            seed=ctx.seed,
            device=ctx.device,
            bf16=ctx.bf16,
            warmup_steps=max(0, round(warmup_ratio * steps)),
            max_grad_norm=max_grad_norm,
            sampler=sampler,
            router_mapping=router_mapping or {},
            learning_rate_mapping=learning_rate_mapping or {},
            eval_steps=eval_steps if evaluator is not None else None,
            extra=extra_args,
        )
        return engine_train(
            model, loss, data, spec, callbacks=callbacks, evaluator=evaluator, data_collator=data_collator
        )


@dataclass
class QueryPools:
    """Pooled-AUC scores grouped by query; ``len()`` is the number of queries (the bootstrap's items)."""

    positives: list[np.ndarray]
    negatives: list[np.ndarray]

    def __len__(self) -> int:
        return len(self.positives)

    def pair_counts(self) -> np.ndarray:
        """``C[i, j]`` = #(positive of query i > negative of query j) + ½ #ties, computed once: the pooled AUC of
        queries drawn with multiplicities ``w`` is ``wᵀCw / ((w·P)(w·N))`` (P, N: each query's pool sizes)."""
        if getattr(self, "_counts", None) is None:
            n_pos = np.array([len(p) for p in self.positives])
            n_neg = np.array([len(n) for n in self.negatives])
            counts = np.zeros((len(self), len(self)))
            if n_pos.sum():
                pos = np.concatenate(self.positives)
                starts = np.concatenate([[0], np.cumsum(n_pos)[:-1]])
                has = n_pos > 0
                for j, neg in enumerate(self.negatives):
                    neg = np.sort(neg)
                    below = np.searchsorted(neg, pos, side="left")
                    score = below + 0.5 * (np.searchsorted(neg, pos, side="right") - below)
                    counts[has, j] = np.add.reduceat(score, starts[has])
            self._counts = counts
            self._sizes = (n_pos.astype(float), n_neg.astype(float))
        return self._counts

    @classmethod
    def from_counts(cls, counts: np.ndarray, n_pos: np.ndarray, n_neg: np.ndarray) -> QueryPools:
        """Pools known only by their pair counts and sizes (the compact stored form, :func:`compact_pools`)."""
        pools = cls([np.empty(0)] * len(n_pos), [np.empty(0)] * len(n_neg))
        pools._counts = np.asarray(counts, dtype=float)
        pools._sizes = (np.asarray(n_pos, dtype=float), np.asarray(n_neg, dtype=float))
        return pools


#: the stored form of a pool kept only as its pair counts: twice each count (counts are multiples of ½, so twice is an
#: integer) as little-endian uint32, its four byte planes one after another (the high planes are mostly zero and pack
#: well), zlib-compressed, base64
COMPACT_POOLS = "pair_counts/2x-u32-planes-zlib-base64"
#: the largest pool size a stored pool may record: the sizes are used as float64, which holds integers exactly to 2^53
MAX_POOL_SIZE = 2**53


def compact_pools(pools: dict[str, list], n_queries: int) -> dict[str, Any]:
    """A stored pool (``evaluate_retrieval(...)["auc_pools"]``) as its query × query pair counts
    (:data:`COMPACT_POOLS`): Q² exact integers instead of one float per pooled score (top 500 of a full corpus:
    ~40 MB per arm and seed as JSON lists), and all the query bootstrap of the pooled AUC needs."""
    from st_magnitude._trust.packed import pack_bytes

    grouped = pooled_auc_statistic(pools, n_queries)
    twice = np.rint(2 * grouped.pair_counts())
    n_pos, n_neg = grouped._sizes
    if twice.size and twice.max() >= 2**32:
        raise ValueError(f"pair counts up to {twice.max() / 2:.0f} do not fit the stored form (below 2³¹)")
    planes = twice.astype("<u4").view(np.uint8).reshape(-1, 4).T.tobytes()
    return {
        "format": COMPACT_POOLS,
        "n_queries": int(n_queries),
        "pair_counts": pack_bytes(planes),
        "n_pos": n_pos.astype(int).tolist(),
        "n_neg": n_neg.astype(int).tolist(),
    }


def _unpack_pools(pools: dict[str, Any]) -> QueryPools:
    """The :data:`COMPACT_POOLS` form back as pools known by their pair counts; ``ValueError`` naming the key for
    sizes that are not Q non-negative integers, counts that do not unpack to Q × Q, or a count above what its two
    queries' pools allow (``C[i, j] ≤ P_i · N_j``)."""
    from st_magnitude._trust.packed import unpack_bytes

    q = pools.get("n_queries")
    if not isinstance(q, int) or isinstance(q, bool) or q < 0:
        raise ValueError(f"auc_pools.n_queries must be a non-negative integer, not {q!r}")
    sizes = []
    for key in ("n_pos", "n_neg"):
        v = pools.get(key)
        if not (
            isinstance(v, list)
            and len(v) == q
            and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= MAX_POOL_SIZE for x in v)
        ):
            raise ValueError(
                f"auc_pools.{key} must be a list of {q} non-negative integers (at most 2^53, what a float64 holds "
                "exactly)"
            )
        sizes.append(np.asarray(v, dtype=float))
    try:
        planes = unpack_bytes(pools.get("pair_counts"), 4 * q * q)
    except ValueError as exc:
        raise ValueError(f"auc_pools.pair_counts {exc}") from None
    twice = np.frombuffer(planes, dtype=np.uint8).reshape(4, q * q).T.copy().view("<u4").reshape(q, q)
    counts = twice.astype(float) / 2
    if (counts > np.outer(*sizes)).any():
        raise ValueError("auc_pools.pair_counts holds a count above its queries' positives × negatives")
    return QueryPools.from_counts(counts, *sizes)


def pooled_auc_statistic(pools: dict[str, Any], n_queries: int | None = None) -> QueryPools:
    """Group a stored pool (``evaluate_retrieval(...)["auc_pools"]``, or its :func:`compact_pools` form) by query,
    for :func:`auc_stat`."""
    if "format" in pools:
        if pools["format"] != COMPACT_POOLS:
            raise ValueError(f"auc_pools.format must be {COMPACT_POOLS!r}, not {pools['format']!r}")
        grouped = _unpack_pools(pools)
        if n_queries is not None and len(grouped) != n_queries:
            raise ValueError(f"auc_pools hold {len(grouped)} queries, the per-query scores {n_queries}")
        return grouped
    pos, neg = np.asarray(pools["positives"], dtype=float), np.asarray(pools["negatives"], dtype=float)
    pq, nq = np.asarray(pools["positive_query"], dtype=int), np.asarray(pools["negative_query"], dtype=int)
    if n_queries is None:
        n_queries = int(max(pq.max(initial=-1), nq.max(initial=-1))) + 1
    for kind, scores, query in (("positive", pos, pq), ("negative", neg, nq)):
        if scores.shape != query.shape or scores.ndim != 1:
            raise ValueError(f"auc_pools: {kind}s and {kind}_query must be lists of one length")
        if not np.isfinite(scores).all():
            raise ValueError(f"auc_pools: every {kind} score must be a finite number")
        if query.size and (query.min() < 0 or query.max() >= n_queries):
            raise ValueError(f"auc_pools: {kind}_query must lie in [0, {n_queries}), the queries scored")
    return QueryPools([pos[pq == i] for i in range(n_queries)], [neg[nq == i] for i in range(n_queries)])


def auc_stat(pools: QueryPools, idx: np.ndarray) -> float:
    """``statistic(values, idx)`` for :func:`~st_magnitude.evaluation.stats.compare_arms`: the pooled AUC of the
    resampled queries (each drawn query contributes all its positives and negatives, with multiplicity), from the
    query × query pair counts (:meth:`QueryPools.pair_counts`; equal to ranking the concatenated pools)."""
    counts = pools.pair_counts()
    n_pos, n_neg = pools._sizes
    w = np.bincount(np.asarray(idx, dtype=int), minlength=len(pools)).astype(float)
    total = float(w @ n_pos) * float(w @ n_neg)
    if total == 0:
        return float("nan")
    return float(w @ counts @ w / total)
