"""Exact top-k on a GPU for a half-precision corpus: scores in the corpus's dtype, one ``topk`` per chunk.

:func:`~st_magnitude.evaluation.search.topk_search` takes this path when it scores on CUDA, the corpus is an fp16 /
bf16 tensor and the score is an inner product of transformed vectors (dot, a ``Similarity`` of the family). The
matmul runs in the corpus's dtype with float32 accumulation (the reduced-precision reductions of cuBLAS are switched
off for the call), so the corpus is never upcast; each chunk keeps its ``k + TIE_MARGIN`` best with one ``topk`` and
nothing is read on the host until the end. Then the candidates are ordered as the general path orders (score
descending, corpus position ascending).

Two cases hand the search back to the general path (one host read decides, at the end): a NaN score (the general
path ranks NaN last and warns), or a run of equal scores at a chunk's cut longer than ``TIE_MARGIN`` (then the
candidates kept might not hold the first documents of the run).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import Tensor

HALF = (torch.float16, torch.bfloat16)
#: score elements (query block × corpus chunk) held at once: 256 MiB of fp16
DEVICE_WORKING_SCORES = 1 << 27
#: candidates kept per chunk beyond k, so that equal scores at the cut are all kept
TIE_MARGIN = 16


def takes_device_path(corpus: object, device: torch.device, transforms: tuple[Callable, Callable] | None) -> bool:
    """The search scores on CUDA, an inner product, over an fp16 / bf16 tensor corpus."""
    return device.type == "cuda" and transforms is not None and isinstance(corpus, Tensor) and corpus.dtype in HALF


@contextmanager
def fp32_accumulation() -> Iterator[None]:
    """Half-precision matmuls accumulate in float32 inside the block (no reduced-precision split-K reductions)."""
    matmul = torch.backends.cuda.matmul
    saved = (matmul.allow_fp16_reduced_precision_reduction, matmul.allow_bf16_reduced_precision_reduction)
    matmul.allow_fp16_reduced_precision_reduction = False
    matmul.allow_bf16_reduced_precision_reduction = False
    try:
        yield
    finally:
        matmul.allow_fp16_reduced_precision_reduction, matmul.allow_bf16_reduced_precision_reduction = saved


def half_topk(
    queries: Tensor,
    corpus: Tensor,
    k: int,
    transforms: tuple[Callable, Callable],
    order: Callable[[Tensor, Tensor, int], tuple[Tensor, Tensor]],
    corpus_chunk_size: int | None = None,
) -> tuple[Tensor, Tensor] | None:
    """``(scores float32, indices int64)`` ``[Q, k]`` on the queries' device, each row ordered by ``order``
    (:func:`~st_magnitude.evaluation.search._topk_ordered`); ``None`` when the general path must decide (a NaN
    score, or a run of equal scores at a chunk's cut longer than :data:`TIE_MARGIN`)."""
    dtype, device = corpus.dtype, queries.device
    n_docs, n_queries = corpus.shape[0], queries.shape[0]
    rows = corpus_chunk_size or max(1024, DEVICE_WORKING_SCORES // max(1, n_queries))
    q = transforms[0](queries.float()).to(dtype)
    values, indices = [], []
    unsure = torch.zeros((), dtype=torch.bool, device=device)
    with torch.no_grad(), fp32_accumulation():
        for start in range(0, n_docs, rows):
            docs = transforms[1](corpus[start : start + rows].to(device)).to(dtype)
            scores = q @ docs.T
            kk = min(k + TIE_MARGIN, scores.shape[1])
            top, cols = torch.topk(scores, kk, dim=1)
            unsure |= torch.isnan(top[:, 0]).any()
            if k < kk < scores.shape[1]:  # the run of equal scores at the cut reaches the last candidate kept
                unsure |= (top[:, kk - 1] == top[:, k - 1]).any()
            values.append(top)
            indices.append(cols + start)
        if bool(unsure):  # the one host read of the search before its result
            return None
        top, idx = order(torch.cat(values, 1).float(), torch.cat(indices, 1), k)
    return top, idx
