"""The search core: exact top-k over a corpus of any size in one pass, and an optional faiss (inner product) backend.

:func:`topk_search` reads the corpus once, in chunks of ``corpus_chunk_size`` rows (from a tensor, a numpy array /
memmap, or an :class:`~st_magnitude.evaluation.embeddings_store.EmbeddingStore` file read ahead in a background
thread), scores every query block against the chunk into one reused buffer, takes the chunk's top k, and merges it
into a running top k per query. Time is one pass over the corpus; memory is the corpus (or nothing, for a file) plus
a fixed working set (one score block of at most ``2**24`` floats, one corpus chunk, and the ``queries × k`` state).

Order is total and deterministic: by score (descending), then by corpus position (ascending) — equal scores keep the
document that comes first, whatever the chunk sizes. NaN scores (a diverged model) are ranked last as −∞ with a
warning. See ``docs/evaluation.md`` ("Search at scale") and ``benchmarks/bench_scale.py``.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch import Tensor
from tqdm.auto import tqdm

from st_magnitude.evaluation._device_search import half_topk, takes_device_path
from st_magnitude.evaluation.embeddings_store import EmbeddingStore
from st_magnitude.similarity import PowerNormSimilarity

__all__ = [
    "ann_search",
    "build_faiss_index",
    "results_from_topk",
    "search_recall",
    "topk_search",
]

ScoreFn = Callable[[Tensor, Tensor], Tensor]
CorpusLike = Tensor | np.ndarray | EmbeddingStore | str | os.PathLike

#: score elements (query block × corpus chunk) held at once: 64 MiB of float32
WORKING_SCORES = 1 << 24
#: largest query block (rows of one matmul)
MAX_QUERY_BLOCK = 4096
FAISS_INDEXES = ("flat", "hnsw")


# ----------------------------------------------------------------------------------------------------------------
# corpus readers
# ----------------------------------------------------------------------------------------------------------------
def as_corpus(corpus: CorpusLike) -> Tensor | np.ndarray | EmbeddingStore:
    """A path becomes an :class:`EmbeddingStore`; tensors and arrays are checked to be 2-D."""
    if isinstance(corpus, (str, os.PathLike)):
        return EmbeddingStore(corpus)
    if isinstance(corpus, (Tensor, np.ndarray)):
        if corpus.ndim != 2:
            raise ValueError(f"corpus embeddings must be 2-D [documents, dim], got shape {tuple(corpus.shape)}")
        return corpus
    if isinstance(corpus, EmbeddingStore):
        return corpus
    raise TypeError(
        f"corpus embeddings must be a torch.Tensor, a numpy array / memmap, an EmbeddingStore or a path to a .npy "
        f"file; got {type(corpus).__name__}"
    )


def _chunks(corpus: Tensor | np.ndarray | EmbeddingStore, rows: int, device: torch.device) -> Iterator[Tensor]:
    """float32 row chunks of the corpus on ``device``; views where possible, else one reused buffer."""
    n, dim = corpus.shape[0], corpus.shape[1]
    if isinstance(corpus, Tensor):
        direct = corpus.dtype == torch.float32 and corpus.device == device
        buf = None if direct else torch.empty(min(rows, n), dim, dtype=torch.float32, device=device)
        for start in range(0, n, rows):
            part = corpus[start : start + rows]
            yield part if direct else buf[: part.shape[0]].copy_(part)
        return
    if isinstance(corpus, np.ndarray):
        direct = corpus.dtype == np.float32 and corpus.flags.c_contiguous and device.type == "cpu"
        buf = None if direct else torch.empty(min(rows, n), dim, dtype=torch.float32, device=device)
        for start in range(0, n, rows):
            with warnings.catch_warnings():  # a read-only memmap: the chunk is only read
                warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
                part = torch.from_numpy(np.ascontiguousarray(corpus[start : start + rows]))
            yield part if direct else buf[: part.shape[0]].copy_(part)
        return
    # EmbeddingStore: plain file reads into two alternating buffers, the next one read in a background thread
    rows = min(rows, n)
    host = [np.empty((rows, dim), dtype=corpus.dtype) for _ in range(2)]
    direct = corpus.dtype == np.float32 and device.type == "cpu"
    buf = None if direct else torch.empty(rows, dim, dtype=torch.float32, device=device)
    starts = list(range(0, n, rows))
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(corpus.read_into, 0, min(rows, n), host[0])
        for j, start in enumerate(starts):
            view = pending.result()
            if j + 1 < len(starts):
                nxt = starts[j + 1]
                pending = pool.submit(corpus.read_into, nxt, min(nxt + rows, n), host[(j + 1) % 2])
            part = torch.from_numpy(view)
            yield part if direct else buf[: part.shape[0]].copy_(part)


# ----------------------------------------------------------------------------------------------------------------
# scoring
# ----------------------------------------------------------------------------------------------------------------
def _inner_product_transforms(score_fn: ScoreFn | None) -> tuple[Callable, Callable] | None:
    """``(f_q, f_d)`` with ``score_fn(q, d) == f_q(q) @ f_d(d).T`` when that is known, else ``None``."""

    def identity(x: Tensor) -> Tensor:
        return x

    if score_fn is None:
        return identity, identity
    from sentence_transformers.util import dot_score

    if score_fn is dot_score:
        return identity, identity
    owner = getattr(score_fn, "__self__", None)
    if getattr(score_fn, "__name__", "") == "similarity" and getattr(owner, "similarity_fn_name", None) == "dot":
        return identity, identity  # model.similarity of a converted (or dot) model
    if isinstance(score_fn, PowerNormSimilarity):  # only the power-norm family is φ_γq(q)·φ_γd(d)
        gq, gd = score_fn.gammas()
        if not isinstance(gq, Tensor) and not isinstance(gd, Tensor):
            return score_fn.transform_query, score_fn.transform_document
        return (lambda q: score_fn.transform_query(q).detach()), (lambda d: score_fn.transform_document(d).detach())
    return None


def _topk_ordered(values: Tensor, indices: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The first ``k`` of each row ordered by (value descending, index ascending).

    A ``topk`` of k + 1 settles every row in which no two of those values are equal (the usual case); only rows with
    equal values are re-ordered with two sorts (by index, then stably by value).
    """
    kk = min(k + 1, values.shape[1])
    top, perm = torch.topk(values, kk, dim=1)
    if kk < 2:
        return top[:, :k], indices.gather(1, perm[:, :k])
    tied = (top[:, 1:] == top[:, :-1]).any(dim=1)
    top, idx = top[:, :k], indices.gather(1, perm[:, :k])
    if bool(tied.any()):
        rows = tied.nonzero().squeeze(1)
        sub_i, order = torch.sort(indices[rows], dim=1)
        sub_v = values[rows].gather(1, order)
        sub_v, order = torch.sort(sub_v, dim=1, descending=True, stable=True)
        top[rows] = sub_v[:, :k]
        idx[rows] = sub_i.gather(1, order)[:, :k]
    return top, idx


def _block_topk(scores: Tensor, k: int) -> tuple[Tensor, Tensor, int]:
    """Top ``k`` columns of each row of ``scores``, with the lowest column winning ties at the cut; NaN → −∞."""
    n_cols = scores.shape[1]
    kk = min(k + 1, n_cols)  # one more, to see whether the cut falls inside a run of equal scores
    values, cols = torch.topk(scores, kk, dim=1)
    n_nan = 0
    if values.numel() and bool(torch.isnan(values[:, 0]).any()):  # topk ranks NaN above everything
        nan = torch.isnan(scores)
        n_nan = int(nan.sum())
        scores = scores.masked_fill(nan, -math.inf)
        values, cols = torch.topk(scores, kk, dim=1)
    if kk <= k:
        return values, cols, n_nan
    tie = values[:, k - 1] == values[:, k]
    values, cols = values[:, :k].clone(), cols[:, :k].clone()
    if bool(tie.any()):
        rows = tie.nonzero().squeeze(1)
        sub = scores[rows]
        cut = values[rows, k - 1 :]
        above, equal = sub > cut, sub == cut
        need = k - above.sum(dim=1, keepdim=True)
        keep = above | (equal & (equal.cumsum(dim=1) <= need))
        picked = keep.nonzero()[:, 1].view(len(rows), k)
        values[rows] = sub.gather(1, picked)
        cols[rows] = picked
    return values, cols, n_nan


#: columns per group whose maximum is compared with the cut first (one cheap pass instead of a full mask)
_GROUP = 16


def _candidates(scores: Tensor, cut: Tensor, start: int) -> tuple[Tensor, Tensor, int] | None:
    """Entries of ``scores`` above each row's current k-th best ``cut`` (and NaNs), padded to ``[rows, m]`` with −∞
    at position ``2**62``; ``None`` when there are too many for this to beat a ``topk``.

    One pass takes the maximum of every group of _GROUP columns (a strided view, no copy); only groups whose maximum
    passes are looked at column by column. Entries equal to ``cut`` are left out: they come later in the corpus than
    the k-th entry kept so far, so they lose the tie. NaN passes ``not (s <= cut)`` and is turned into −∞ (and
    counted) here.
    """
    n_rows, n_cols = scores.shape
    n_groups = n_cols // _GROUP
    device = scores.device
    rows_list, cols_list, vals_list = [], [], []
    if n_groups:
        s0, s1 = scores.stride()
        groups = scores.as_strided((n_rows, n_groups, _GROUP), (s0, _GROUP * s1, s1))
        hit = torch.le(groups.amax(dim=2), cut).logical_not_().nonzero()  # [h, 2]: (row, group)
        if hit.shape[0] * _GROUP * 4 > scores.numel():
            return None
        sub = groups[hit[:, 0], hit[:, 1]]  # [h, G]
        keep = torch.le(sub, cut[hit[:, 0]]).logical_not_()
        rows_list.append(hit[:, :1].expand(-1, _GROUP)[keep])
        cols_list.append((hit[:, 1:] * _GROUP + torch.arange(_GROUP, device=device))[keep])
        vals_list.append(sub[keep])
    if n_groups * _GROUP < n_cols:
        tail = scores[:, n_groups * _GROUP :]
        r, c = torch.le(tail, cut).logical_not_().nonzero(as_tuple=True)
        rows_list.append(r)
        cols_list.append(c + n_groups * _GROUP)
        vals_list.append(tail[r, c])
    rows, cols, values = torch.cat(rows_list), torch.cat(cols_list), torch.cat(vals_list)
    nan = torch.isnan(values)
    n_nan = int(nan.sum())
    if n_nan:
        values = values.masked_fill(nan, -math.inf)
    rows, order = torch.sort(rows, stable=True)
    cols, values = cols[order], values[order]
    counts = torch.bincount(rows, minlength=n_rows)
    widest = int(counts.max()) if rows.numel() else 0
    offsets = torch.cumsum(counts, 0) - counts
    pos = torch.arange(rows.numel(), device=device) - offsets[rows]
    out_v = torch.full((n_rows, widest), -math.inf, dtype=values.dtype, device=device)
    out_i = torch.full((n_rows, widest), 1 << 62, dtype=torch.int64, device=device)
    out_v[rows, pos] = values
    out_i[rows, pos] = cols + start
    return out_v, out_i, n_nan


def _update(
    state: tuple[Tensor, Tensor] | None, scores: Tensor, k: int, start: int
) -> tuple[tuple[Tensor, Tensor], int]:
    """Merge one score block (columns = corpus rows ``start:``) into the running top k of its queries.

    The block is taken in segments: the first few thousand columns of the corpus through ``torch.topk``; after that
    each query's k-th score is known and a segment (as long as everything seen so far, so about k entries per row
    pass) is only filtered against it (:func:`_candidates`), with a ``topk`` as the fallback when many entries pass.
    """
    n_nan = 0
    col, n_cols = 0, scores.shape[1]
    while col < n_cols:
        seen = start + col
        if state is None or state[0].shape[1] < k:
            stop = min(n_cols, col + max(16 * k, 4096))
            found = None
        else:
            stop = min(n_cols, col + max(4096, seen))
            found = _candidates(scores[:, col:stop], state[0][:, k - 1 :], seen)
        if found is None:
            values, cols, nan = _block_topk(scores[:, col:stop], k)
            cols += seen
        else:
            values, cols, nan = found
        n_nan += nan
        if state is not None:
            values, cols = torch.cat([state[0], values], 1), torch.cat([state[1], cols], 1)
        state = _topk_ordered(values, cols, k)
        col = stop
    return state, n_nan


@contextmanager
def _bookkeeping_threads(device: torch.device) -> Iterator[None]:
    """One intra-op thread on CPU for the top-k bookkeeping (many small ops): with OpenMP every op is a parallel
    region, and on a busy machine each region waits for a descheduled thread — measured 4× slower at 10k documents
    on 2 busy cores. The matmul keeps all threads. (``torch.set_num_threads`` is process-wide for the moment.)"""
    threads = torch.get_num_threads()
    if device.type != "cpu" or threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def topk_search(
    query_embeddings: Tensor | np.ndarray,
    corpus_embeddings: CorpusLike,
    k: int,
    score_fn: ScoreFn | None = None,
    *,
    query_chunk_size: int | None = None,
    corpus_chunk_size: int | None = None,
    device: str | torch.device | None = None,
    show_progress_bar: bool = False,
) -> tuple[Tensor, Tensor]:
    """Exact top ``k`` of every query over the corpus, in one pass over the corpus.

    Args:
        query_embeddings: ``[Q, n]`` queries (as the model emits them for the query role).
        corpus_embeddings: ``[N, n]`` documents: a tensor, a numpy array / memmap, an :class:`EmbeddingStore` or a
            path to a ``.npy`` file (read in chunks: memory stays at one chunk whatever N is).
        k: results per query (capped at N).
        score_fn: ``fn(Q[b, n], D[c, n]) -> [b, c]``; ``None`` is the dot product. Dot products, a model's own
            ``model.similarity`` when it serves ``"dot"`` and any :class:`~st_magnitude.similarity.Similarity` run as
            one matmul into a reused buffer; other callables are called per block.
        query_chunk_size: queries per block (default: all, up to 4096).
        corpus_chunk_size: corpus rows per chunk (default: ``2**24 / query block``, at least 1024).
        device: where to score (default: the queries' device); chunks are moved there.
        show_progress_bar: a tqdm bar over documents.

    Returns:
        ``(scores, indices)``, both ``[Q, min(k, N)]``, each row ordered by score (descending) then corpus position
        (ascending); ``scores`` float32, ``indices`` int64 positions in the corpus.

    On CUDA, an fp16 / bf16 tensor corpus scored by an inner product is scored in its own dtype with float32
    accumulation (:mod:`~st_magnitude.evaluation._device_search`: no float32 copy of the corpus, one ``topk`` per
    chunk, no host read per chunk); the scores are then those half-precision values, and equal scores are ordered by
    corpus position as everywhere. Elsewhere (the CPU, float32 corpora, files) every score is computed in float32.
    """
    corpus = as_corpus(corpus_embeddings)
    if not isinstance(query_embeddings, Tensor):
        query_embeddings = torch.from_numpy(np.ascontiguousarray(query_embeddings))
    if query_embeddings.ndim != 2:
        raise ValueError(f"query embeddings must be 2-D [queries, dim], got shape {tuple(query_embeddings.shape)}")
    n_docs, dim = int(corpus.shape[0]), int(corpus.shape[1])
    n_queries = int(query_embeddings.shape[0])
    if n_docs == 0:
        raise ValueError("The corpus is empty: retrieval needs at least one document.")
    if query_embeddings.shape[1] != dim:
        raise ValueError(f"Embedding dimensions differ: queries have {query_embeddings.shape[1]}, documents {dim}.")
    if not (isinstance(k, int) and k > 0):
        raise ValueError(f"top_k must be a positive int, got {k!r}")
    for label, value in (("query_chunk_size", query_chunk_size), ("corpus_chunk_size", corpus_chunk_size)):
        if value is not None and not (isinstance(value, int) and value > 0):
            raise ValueError(f"{label} must be None (automatic) or a positive int, got {value!r}")
    device = torch.device(device) if device is not None else query_embeddings.device
    k = min(k, n_docs)
    q_block = query_chunk_size or max(1, min(n_queries, MAX_QUERY_BLOCK))
    c_rows = corpus_chunk_size or max(1024, WORKING_SCORES // max(1, min(q_block, n_queries)))
    c_rows = min(c_rows, n_docs)
    transforms = _inner_product_transforms(score_fn)
    blocks = [(s, min(s + q_block, n_queries)) for s in range(0, n_queries, q_block)]
    if takes_device_path(corpus, device, transforms):  # a half-precision corpus on a GPU: scored in its dtype
        found = [
            half_topk(query_embeddings[qs:qe].to(device), corpus, k, transforms, _topk_ordered, corpus_chunk_size)
            for qs, qe in blocks
        ]
        if all(f is not None for f in found):
            return torch.cat([f[0] for f in found]).cpu(), torch.cat([f[1] for f in found]).cpu()
    queries = query_embeddings.to(device=device, dtype=torch.float32)
    state: list[tuple[Tensor, Tensor] | None] = [None] * len(blocks)
    n_nan = 0
    with torch.no_grad():
        if transforms is not None:
            queries = transforms[0](queries).float()
            buffer = torch.empty(min(q_block, n_queries) * c_rows, dtype=torch.float32, device=device)
        bar = tqdm(total=n_docs, desc="exact search", unit="doc", disable=not show_progress_bar)
        start = 0
        for chunk in _chunks(corpus, c_rows, device):
            rows = chunk.shape[0]
            docs = transforms[1](chunk).float() if transforms is not None else chunk
            for b, (qs, qe) in enumerate(blocks):
                if transforms is not None:
                    scores = torch.mm(queries[qs:qe], docs.T, out=buffer[: (qe - qs) * rows].view(qe - qs, rows))
                else:
                    scores = score_fn(queries[qs:qe], docs)
                    scores = (scores if isinstance(scores, Tensor) else torch.as_tensor(scores)).float()
                    if scores.shape != (qe - qs, rows):
                        raise ValueError(
                            f"score_fn returned shape {tuple(scores.shape)} for {qe - qs} queries × {rows} documents"
                        )
                with _bookkeeping_threads(device):
                    state[b], nan = _update(state[b], scores, k, start)
                n_nan += nan
            start += rows
            bar.update(rows)
        bar.close()
    if n_nan:
        warnings.warn(
            f"{n_nan} NaN retrieval score(s): the embeddings contain NaN/inf (a collapsed or diverged model?). "
            "They are ranked last.",
            RuntimeWarning,
            stacklevel=2,
        )
    values = torch.cat([s[0] for s in state], 0).cpu()
    indices = torch.cat([s[1] for s in state], 0).cpu()
    return values, indices


def results_from_topk(
    values: Tensor,
    indices: Tensor,
    query_ids: Sequence[str],
    corpus_ids: Sequence[str],
    top_k: int,
    *,
    ignore_identical_ids: bool = True,
) -> dict[str, dict[str, float]]:
    """``{query_id: {doc_id: score}}`` from :func:`topk_search` output (at most ``top_k`` per query); with
    ``ignore_identical_ids`` a document whose id equals the query id is dropped (search ``top_k + 1`` for it)."""
    vals, idx = values.tolist(), indices.tolist()
    results: dict[str, dict[str, float]] = {}
    duplicates = 0
    short = bool((indices < 0).any())  # faiss pads with -1 when it finds fewer than k
    for row, qid in enumerate(query_ids):
        cols, scores = idx[row], vals[row]
        if short:
            scores = [v for j, v in zip(cols, scores) if j >= 0]
            cols = [j for j in cols if j >= 0]
        hit_ids = [corpus_ids[j] for j in cols]
        if ignore_identical_ids and qid in hit_ids:
            keep = [c != qid for c in hit_ids]
            hit_ids = [c for c, ok in zip(hit_ids, keep) if ok]
            scores = [v for v, ok in zip(scores, keep) if ok]
        hit_ids, scores = hit_ids[:top_k], scores[:top_k]
        hits = dict(zip(hit_ids, scores))
        duplicates += len(hit_ids) - len(hits)
        results[qid] = hits
    if duplicates:
        warnings.warn(
            f"corpus_ids contain duplicates ({duplicates} repeated id(s) among the hits): results are keyed by id, so "
            "those hits were merged. Give every document a unique id.",
            RuntimeWarning,
            stacklevel=2,
        )
    return results


def search_recall(
    approximate: dict[str, dict[str, float]], exact: dict[str, dict[str, float]], k: int | None = None
) -> float:
    """Mean over the queries of ``exact`` of |top-k approximate ∩ top-k exact| / |top-k exact| (recall@k of an ANN
    search against exact search); ``k=None`` compares the whole result lists."""
    if not exact:
        raise ValueError("exact results are empty")
    total = 0.0
    for qid, ref in exact.items():
        ref_top = sorted(ref, key=lambda c: -ref[c])[:k] if k else list(ref)
        got = approximate.get(qid, {})
        got_top = set(sorted(got, key=lambda c: -got[c])[:k] if k else got)
        total += len(got_top.intersection(ref_top)) / max(1, len(ref_top))
    return total / len(exact)


# ----------------------------------------------------------------------------------------------------------------
# faiss (optional extra)
# ----------------------------------------------------------------------------------------------------------------
def _import_faiss():
    try:
        import faiss
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "The faiss backend needs faiss: pip install 'st-magnitude[faiss]' (faiss-cpu), or faiss-gpu."
        ) from exc
    return faiss


def _faiss_transforms(score_fn: ScoreFn | None) -> tuple[Callable, Callable]:
    transforms = _inner_product_transforms(score_fn)
    if transforms is None:
        raise ValueError(
            "The faiss backend scores inner products only (METRIC_INNER_PRODUCT); score_fn must be None (dot), a "
            "model.similarity serving 'dot' (a converted model) or an st_magnitude Similarity. For another score, "
            "use exact_search."
        )
    return transforms


def build_faiss_index(
    corpus_embeddings: CorpusLike,
    score_fn: ScoreFn | None = None,
    *,
    index: str = "hnsw",
    hnsw_m: int = 32,
    ef_construction: int = 200,
    chunk_size: int = 65536,
    show_progress_bar: bool = False,
) -> Any:
    """A faiss inner-product index over the corpus (``"flat"``: ``IndexFlatIP``, exact; ``"hnsw"``:
    ``IndexHNSWFlat(..., METRIC_INNER_PRODUCT)``), filled chunk by chunk.

    Only inner product is used: the documents are added as the similarity's document side φ_γd(d) and queries are
    searched as φ_γq(q), never L2-normalised (``faiss.normalize_L2`` or a cosine metric would turn qnorm / dnorm /
    dot scores into cosine). The index holds the corpus in RAM (float32).
    """
    faiss = _import_faiss()
    if index not in FAISS_INDEXES:
        raise ValueError(f"index must be one of {list(FAISS_INDEXES)}, got {index!r}")
    _, fd = _faiss_transforms(score_fn)
    corpus = as_corpus(corpus_embeddings)
    dim = int(corpus.shape[1])
    if index == "flat":
        ix = faiss.IndexFlatIP(dim)
    else:
        ix = faiss.IndexHNSWFlat(dim, hnsw_m, faiss.METRIC_INNER_PRODUCT)
        ix.hnsw.efConstruction = ef_construction
    bar = tqdm(total=int(corpus.shape[0]), desc=f"faiss {index} index", unit="doc", disable=not show_progress_bar)
    with torch.no_grad():
        for chunk in _chunks(corpus, chunk_size, torch.device("cpu")):
            ix.add(np.ascontiguousarray(fd(chunk).float().numpy()))
            bar.update(chunk.shape[0])
    bar.close()
    return ix


def ann_search(
    query_embeddings: Tensor | np.ndarray,
    corpus_embeddings: CorpusLike | Any,
    query_ids: Sequence[str],
    corpus_ids: Sequence[str],
    top_k: int = 100,
    score_fn: ScoreFn | None = None,
    *,
    index: str = "hnsw",
    ef_search: int = 256,
    ignore_identical_ids: bool = True,
    **index_kwargs: Any,
) -> dict[str, dict[str, float]]:
    """Approximate top-k with faiss (extra ``faiss``): ``{query_id: {doc_id: score}}`` like :func:`exact_search`.

    ``corpus_embeddings`` is an embedding source (then an index is built with :func:`build_faiss_index`, passing
    ``index`` and ``index_kwargs``) or a faiss index built before. Scores are inner products of φ_γq(q) and φ_γd(d),
    i.e. the model's own similarity. Compare with exact search via :func:`search_recall`.
    """
    faiss = _import_faiss()
    fq, _ = _faiss_transforms(score_fn)
    if isinstance(corpus_embeddings, faiss.Index):
        ix = corpus_embeddings
    else:
        ix = build_faiss_index(corpus_embeddings, score_fn, index=index, **index_kwargs)
    if ix.ntotal != len(corpus_ids):
        raise ValueError(f"the index holds {ix.ntotal} documents but {len(corpus_ids)} corpus ids were given")
    if len(query_ids) != len(query_embeddings):
        raise ValueError(f"{len(query_ids)} query ids for {len(query_embeddings)} query embeddings")
    if not (isinstance(top_k, int) and top_k > 0):
        raise ValueError(f"top_k must be a positive int, got {top_k!r}")
    if hasattr(ix, "hnsw"):
        ix.hnsw.efSearch = max(ef_search, top_k + 1)
    q = query_embeddings if isinstance(query_embeddings, Tensor) else torch.from_numpy(np.asarray(query_embeddings))
    with torch.no_grad():
        q = np.ascontiguousarray(fq(q.float().cpu()).float().numpy())
    kk = min(top_k + (1 if ignore_identical_ids else 0), ix.ntotal)
    scores, indices = ix.search(q, kk)
    return results_from_topk(
        torch.from_numpy(scores),
        torch.from_numpy(indices),
        query_ids,
        corpus_ids,
        top_k,
        ignore_identical_ids=ignore_identical_ids,
    )
