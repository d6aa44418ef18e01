"""The GPU path of exact search (a half-precision corpus scored in its dtype), run on the CPU.

Integer-valued embeddings make every fp16 score exact, so the path must give the general path's result to the bit:
the same scores and the same order (score descending, then corpus position), equal scores included. A run of equal
scores longer than the candidates a chunk keeps, or a NaN, hands the search back to the general path.
"""

from __future__ import annotations

import pytest
import torch

from st_magnitude.evaluation import search
from st_magnitude.evaluation._device_search import HALF, TIE_MARGIN, half_topk
from st_magnitude.evaluation.search import _inner_product_transforms, _topk_ordered, topk_search

DOT = _inner_product_transforms(None)


def _integers(rows: int, dim: int = 16, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-8, 9, (rows, dim), generator=g).to(torch.float16)  # |score| < 2048: exact in fp16


@pytest.mark.parametrize("chunk", [700, 5000])
def test_scores_and_order_equal_the_general_path(chunk):
    corpus, queries = _integers(3000), _integers(20, seed=1)
    corpus[1500] = corpus[10]  # a duplicate document: its equal score must come after the first
    found = half_topk(queries, corpus, 10, DOT, _topk_ordered, corpus_chunk_size=chunk)
    assert found is not None
    values, indices = topk_search(queries.float(), corpus.float(), 10)
    torch.testing.assert_close(found[0], values, rtol=0, atol=0)
    assert torch.equal(found[1], indices)
    assert found[0].dtype == torch.float32


def test_a_long_run_of_equal_scores_or_a_nan_hands_back():
    same = _integers(1, seed=2).expand(200, -1).contiguous()  # every document scores the same
    assert half_topk(_integers(3), same, 5, DOT, _topk_ordered, corpus_chunk_size=5 + TIE_MARGIN + 1) is None
    corpus = _integers(300)
    corpus[7, 3] = float("nan")
    assert half_topk(_integers(3), corpus, 5, DOT, _topk_ordered) is None


def test_topk_search_takes_it_for_a_half_corpus_and_falls_back_when_unsure(monkeypatch):
    seen = []

    def takes(corpus, device, transforms):
        seen.append(corpus.dtype)
        return transforms is not None and corpus.dtype in HALF

    monkeypatch.setattr(search, "takes_device_path", takes)
    queries = _integers(4, seed=3)
    for corpus in (_integers(2000), _integers(1, seed=4).expand(2000, -1).contiguous()):
        values, indices = topk_search(queries, corpus, 20, corpus_chunk_size=512)
        expected = topk_search(queries.float(), corpus.float(), 20, corpus_chunk_size=512)
        torch.testing.assert_close(values, expected[0], rtol=0, atol=0)
        assert torch.equal(indices, expected[1])
    assert seen[0] == torch.float16
