"""The κ rule on a model (paper 000 §4.5): sample (query, relevant document) pairs from BEIR qrels and run it."""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Sequence
from pathlib import Path

from st_magnitude.data.beir import doc_text, load_beir
from st_magnitude.diagnostics.fim import (
    ConditionNumberResult,
    kappa_min_pairs,
    recommend_normalization,
)
from st_magnitude.evaluation.ir import encode_roles
from st_magnitude.model.load import raw_model

logger = logging.getLogger(__name__)

__all__ = ["embedding_dim", "kappa_pair_pools", "kappa_pairs", "run_kappa", "sample_kappa_pairs"]


def kappa_pair_pools(
    folders: Sequence[str | os.PathLike], split: str = "train"
) -> tuple[list[list[tuple[str, str]]], list[tuple[str, int]]]:
    """All (query text, relevant document text) pairs per folder (``split`` qrels, falling back to test).

    Returns the per-folder pools and ``(folder/split, pool size)`` labels; :func:`kappa_pairs` samples from them.
    """
    pools: list[list[tuple[str, str]]] = []
    used = []
    for f in folders:
        path = Path(f)
        sp = split if (path / "qrels" / f"{split}.tsv").is_file() else "test"
        data = load_beir(path, sp, on_missing="drop")
        pool = [
            (data.queries[q], doc_text(data.corpus[d]))
            for q, rel in data.qrels.items()
            for d, g in rel.items()
            if g > 0
        ]
        pools.append(pool)
        used.append((f"{path.name}/{sp}", len(pool)))
    return pools, used


def sample_kappa_pairs(
    pools: list[list[tuple[str, str]]], used: list[tuple[str, int]], n_pairs: int, seed: int = 0
) -> tuple[list[str], list[str], str]:
    """Seeded sample of ``n_pairs`` pairs from :func:`kappa_pair_pools`'s output (see :func:`kappa_pairs`)."""
    total = sum(len(p) for p in pools)
    if total == 0:
        raise ValueError("no relevant (query, document) pairs found for the κ rule")
    if n_pairs > total:
        logger.warning("only %d pairs available (asked for %d)", total, n_pairs)
        n_pairs = total
    quota = [0] * len(pools)
    left = n_pairs
    order = sorted(range(len(pools)), key=lambda i: len(pools[i]))
    for rank, i in enumerate(order):  # smallest pools first; each takes its fair share of what is left
        share = left // (len(pools) - rank)
        quota[i] = min(len(pools[i]), share)
        left -= quota[i]
    rng = random.Random(seed)
    pairs = [pair for i, pool in enumerate(pools) for pair in rng.sample(pool, quota[i])]
    source = " + ".join(f"{name} ({quota[i]} of {n})" for i, (name, n) in enumerate(used))
    return [p[0] for p in pairs], [p[1] for p in pairs], source


def kappa_pairs(
    folders: Sequence[str | os.PathLike], split: str = "train", n_pairs: int = 3072, seed: int = 0
) -> tuple[list[str], list[str], str]:
    """Seeded sample of (query text, relevant document text) pairs from the qrels of several BEIR folders.

    The folders share the budget evenly (a folder with fewer pairs gives all it has, the rest is filled from the
    others), so e.g. SciFact's 919 train pairs are not drowned by NFCorpus's 110k.
    """
    pools, used = kappa_pair_pools(folders, split)
    return sample_kappa_pairs(pools, used, n_pairs, seed)


def embedding_dim(model) -> int:
    """The model's output dimension n (from its modules, else by encoding one text)."""
    for getter in ("get_embedding_dimension", "get_sentence_embedding_dimension"):
        fn = getattr(model, getter, None)
        dim = fn() if fn is not None else None
        if dim:
            return int(dim)
    return int(model.encode_query(["dimension probe"], convert_to_tensor=True).shape[-1])


def run_kappa(
    model,
    folders: Sequence[str | os.PathLike],
    *,
    split: str = "train",
    n_pairs: int | None = None,
    n_bootstrap: int = 100,
    seed: int = 0,
    batch_size: int = 32,
    raw=None,
    max_seq_length: int | None = 64,
    show_progress_bar: bool = True,
) -> tuple[ConditionNumberResult, float, str]:
    """κ rule on the model's raw embeddings of sampled pairs; returns (result, seconds, source description).

    ``n_pairs`` defaults to :func:`~st_magnitude.diagnostics.fim.kappa_min_pairs` (8n: 3072 for a 384-dim model);
    fewer pairs give an "inconclusive" verdict. ``n_bootstrap`` is the number of half-sample replicates.
    ``max_seq_length`` caps the tokens for this step only (default 64: 2000 MiniLM pairs in ≈ 30 s on 2 cores; 128
    took ≈ 130 s and gave the same recommendation on SciFact/NFCorpus); ``None`` keeps the model's own.
    ``show_progress_bar``: tqdm bars for the encoding and the replicates (the step takes minutes on a loaded CPU).
    """
    t0 = time.perf_counter()
    raw = raw if raw is not None else raw_model(model)
    if n_pairs is None:
        n_pairs = kappa_min_pairs(embedding_dim(raw))
    if n_pairs < 2:
        raise ValueError(f"n_pairs must be >= 2 (default: 8n), got {n_pairs}")
    qs, ds, source = kappa_pairs(folders, split, n_pairs, seed)
    old_len = raw.max_seq_length
    if max_seq_length is not None:
        raw.max_seq_length = min(max_seq_length, old_len or max_seq_length)
    uq, ud = list(dict.fromkeys(qs)), list(dict.fromkeys(ds))  # encode each distinct text once
    try:
        q_emb, d_emb = encode_roles(raw, uq, ud, batch_size=batch_size, show_progress_bar=show_progress_bar)
    finally:
        raw.max_seq_length = old_len
    qi = {t: i for i, t in enumerate(uq)}
    di = {t: i for i, t in enumerate(ud)}
    q = q_emb[[qi[t] for t in qs]]
    d = d_emb[[di[t] for t in ds]]
    result = recommend_normalization(q, d, n_bootstrap=n_bootstrap, seed=seed, show_progress_bar=show_progress_bar)
    return result, time.perf_counter() - t0, source
