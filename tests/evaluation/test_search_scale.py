"""Search at scale: the chunked one-pass top-k against independent references (numpy lexsort, a Python loop), the
disk paths against the in-memory one, resumable encoding, and the faiss inner-product backend."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers.extras import need_extra
from hypothesis import given, settings
from hypothesis import strategies as st

from st_magnitude import apply_similarity
from st_magnitude.evaluation import encode_to_store, exact_search, topk_search
from st_magnitude.evaluation.embeddings_store import EmbeddingStore
from st_magnitude.evaluation.search import _update, search_recall
from st_magnitude.similarity import get_similarity


def _reference_topk(q: np.ndarray, d: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """float64 scores, each row ordered by (score descending, position ascending) with numpy's lexsort."""
    scores = q.astype(np.float64) @ d.astype(np.float64).T
    cols = np.arange(d.shape[0])
    order = np.stack([np.lexsort((cols, -row)) for row in scores])[:, :k]
    return np.take_along_axis(scores, order, 1), order


@settings(max_examples=60, deadline=None)
@given(
    nq=st.integers(1, 7),
    nd=st.integers(1, 80),
    dim=st.integers(1, 5),
    k=st.integers(1, 90),
    q_chunk=st.sampled_from([None, 1, 3]),
    c_chunk=st.sampled_from([None, 1, 2, 7, 33]),
    seed=st.integers(0, 10_000),
)
def test_chunked_topk_equals_reference_with_ties(nq, nd, dim, k, q_chunk, c_chunk, seed):
    # Given small-integer embeddings (exact float scores, many equal scores) and any query/corpus chunking
    rng = np.random.default_rng(seed)
    q = rng.integers(-2, 3, (nq, dim)).astype(np.float32)
    d = rng.integers(-2, 3, (nd, dim)).astype(np.float32)
    # When searched in chunks with the running top-k merge
    vals, idx = topk_search(
        torch.from_numpy(q), torch.from_numpy(d), k, query_chunk_size=q_chunk, corpus_chunk_size=c_chunk
    )
    # Then positions and scores equal the lexsort reference exactly: ties go to the earlier document
    ref_v, ref_i = _reference_topk(q, d, k)
    np.testing.assert_array_equal(idx.numpy(), ref_i)
    np.testing.assert_array_equal(vals.numpy(), ref_v.astype(np.float32))


def test_candidate_filter_path_equals_reference_on_large_blocks():
    # Given a corpus large enough that later chunks go through the threshold filter (not a full topk),
    # with heavy ties (values in {-1, 0, 1}, dim 3) and a NaN-free float block
    rng = np.random.default_rng(0)
    for low, high, dim in ((-1, 2, 3), (-50, 51, 16)):
        q = rng.integers(low, high, (9, dim)).astype(np.float32)
        d = rng.integers(low, high, (20_000, dim)).astype(np.float32)
        for chunk in (None, 3000, 9999):
            vals, idx = topk_search(torch.from_numpy(q), torch.from_numpy(d), 50, corpus_chunk_size=chunk)
            ref_v, ref_i = _reference_topk(q, d, 50)
            np.testing.assert_array_equal(idx.numpy(), ref_i)
            np.testing.assert_array_equal(vals.numpy(), ref_v.astype(np.float32))


def test_update_uses_the_filter_and_keeps_lower_index_on_equal_cut():
    # Given a full state whose k-th score is 5 at position 3, When a later block holds another 5 and a 6,
    # Then the 6 enters, the later 5 loses the tie, and the result is ordered (score desc, position asc)
    state = (torch.tensor([[9.0, 5.0]]), torch.tensor([[0, 3]]))
    scores = torch.zeros(1, 100)
    scores[0, 10], scores[0, 20] = 5.0, 6.0
    (v, i), n_nan = _update(state, scores, 2, start=100)
    assert v.tolist() == [[9.0, 6.0]] and i.tolist() == [[0, 120]] and n_nan == 0


def test_nan_in_a_later_chunk_warns_and_ranks_last():
    d = torch.randn(5000, 4)
    d[4321] = float("nan")
    q = torch.randn(2, 4)
    with pytest.warns(RuntimeWarning, match="2 NaN retrieval score"):
        vals, idx = topk_search(q, d, 5000, corpus_chunk_size=1000)
    assert idx[:, -1].tolist() == [4321, 4321] and torch.isinf(vals[:, -1]).all()
    assert torch.isfinite(vals[:, :-1]).all()


@pytest.mark.parametrize("sim", ["qnorm", "cosine", "dnorm", "dot"])
def test_family_similarities_match_their_matrix_form(sim):
    # The fast path (transform once, matmul into a buffer) equals scoring with the Similarity module itself
    g = torch.Generator().manual_seed(1)
    q, d = torch.randn(6, 8, generator=g), torch.randn(300, 8, generator=g) * torch.rand(300, 1, generator=g) * 4
    fn = get_similarity(sim)
    vals, idx = topk_search(q, d, 20, fn, corpus_chunk_size=64)
    ref = fn(q, d)
    torch.testing.assert_close(vals, ref.gather(1, idx), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(vals, torch.topk(ref, 20, dim=1).values, rtol=1e-5, atol=1e-5)


def test_generic_score_fn_and_shape_check():
    q, d = torch.randn(3, 4), torch.randn(50, 4)
    vals, idx = topk_search(q, d, 5, lambda a, b: -torch.cdist(a, b), corpus_chunk_size=7)
    ref = torch.topk(-torch.cdist(q, d), 5, dim=1)
    torch.testing.assert_close(vals, ref.values)
    with pytest.raises(ValueError, match="score_fn returned shape"):
        topk_search(q, d, 5, lambda a, b: (a @ b.T)[:, :1])
    with pytest.raises(ValueError, match="corpus_chunk_size"):
        topk_search(q, d, 5, corpus_chunk_size=0)
    with pytest.raises(ValueError, match="dimensions differ"):
        topk_search(q, torch.randn(5, 3), 2)
    with pytest.raises(TypeError, match="numpy array"):
        topk_search(q, [[1.0] * 4], 2)


def test_exact_search_skips_identical_ids_without_a_corpus_lookup():
    # Given the query's own id in the corpus with the best score, Then it is dropped and top_k others remain
    q = torch.tensor([[1.0, 0.0]])
    d = torch.tensor([[1.0, 0.0], [0.9, 0.0], [0.8, 0.0], [0.7, 0.0]])
    res = exact_search(q, d, ["a"], ["a", "b", "c", "d"], top_k=2)
    assert res == {"a": pytest.approx({"b": 0.9, "c": 0.8})}
    res = exact_search(q, d, ["a"], ["a", "b", "c", "d"], top_k=2, ignore_identical_ids=False)
    assert list(res["a"]) == ["a", "b"]


def test_duplicate_corpus_ids_warn():
    with pytest.warns(RuntimeWarning, match="duplicates"):
        exact_search(torch.ones(1, 2), torch.ones(3, 2), ["q"], ["x", "x", "y"], top_k=3)


# ---- embeddings on disk -------------------------------------------------------------------------------------------


def _save(path, array):
    np.save(path, array)
    return path


def test_store_and_memmap_paths_equal_in_memory(tmp_path):
    rng = np.random.default_rng(3)
    q = torch.from_numpy(rng.standard_normal((7, 16)).astype(np.float32))
    d = rng.standard_normal((5000, 16)).astype(np.float32)
    qids, cids = [f"q{i}" for i in range(7)], [f"d{j}" for j in range(5000)]
    path = _save(tmp_path / "c.npy", d)
    ref = exact_search(q, torch.from_numpy(d), qids, cids, 10, corpus_chunk_size=1500)
    for source in (str(path), EmbeddingStore(path), np.load(path, mmap_mode="r"), d):
        assert exact_search(q, source, qids, cids, 10, corpus_chunk_size=1500) == ref
    # float16 on disk: equal to searching the float16-rounded embeddings in memory
    path16 = _save(tmp_path / "c16.npy", d.astype(np.float16))
    ref16 = exact_search(q, torch.from_numpy(d.astype(np.float16).astype(np.float32)), qids, cids, 10)
    assert exact_search(q, path16, qids, cids, 10, corpus_chunk_size=1500) == ref16


def test_store_validates_files(tmp_path):
    with pytest.raises(FileNotFoundError):
        EmbeddingStore(tmp_path / "missing.npy")
    with pytest.raises(ValueError, match="2-D"):
        EmbeddingStore(_save(tmp_path / "a.npy", np.zeros(4, dtype=np.float32)))
    with pytest.raises(ValueError, match="float32"):
        EmbeddingStore(_save(tmp_path / "b.npy", np.zeros((2, 2), dtype=np.int64)))
    good = _save(tmp_path / "c.npy", np.arange(12, dtype=np.float32).reshape(4, 3))
    with open(good, "r+b") as f:
        f.truncate(good.stat().st_size - 4)
    with pytest.raises(ValueError, match="truncated"):
        EmbeddingStore(good)


class _FakeEncoder:
    """Deterministic 'model': embedding of a text = its character codes folded into 6 dims; counts calls and can
    raise after a number of calls (a fake interruption)."""

    similarity_fn_name = "dot"

    def __init__(self, fail_on_call: int | None = None):
        self.calls = 0
        self.kwargs = []
        self.fail_on_call = fail_on_call

    @staticmethod
    def embed(texts):
        out = np.zeros((len(texts), 6), dtype=np.float32)
        for i, t in enumerate(texts):
            for j, ch in enumerate(t):
                out[i, j % 6] += (ord(ch) % 17) / 10
        return out

    def encode_document(self, texts, **kwargs):
        self.calls += 1
        self.kwargs.append(kwargs)
        if self.fail_on_call is not None and self.calls == self.fail_on_call:
            raise KeyboardInterrupt("simulated interruption")
        return self.embed(texts)

    encode_query = encode_document
    encode = encode_document


def test_encode_to_store_resumes_after_interruption(tmp_path):
    texts = [f"document number {i} about topic {i % 7}" for i in range(103)]
    path = tmp_path / "corpus.npy"
    # Given an encoding interrupted during its 4th block (3 blocks of 10 written and recorded)
    with pytest.raises(KeyboardInterrupt):
        encode_to_store(_FakeEncoder(fail_on_call=4), texts, path, block_size=10, show_progress_bar=False)
    state = json.loads((tmp_path / "corpus.npy.progress.json").read_text())
    assert state["done"] == 30
    # When the same call runs again, Then it encodes only the 8 missing blocks and the file equals a full encoding
    model = _FakeEncoder()
    store = encode_to_store(model, texts, path, block_size=10, show_progress_bar=False)
    assert model.calls == 8
    np.testing.assert_array_equal(store.read(), _FakeEncoder.embed(texts))
    # a finished file is returned at once; other texts are an error, not a silent mix
    again = _FakeEncoder()
    encode_to_store(again, texts, path, block_size=10, show_progress_bar=False)
    assert again.calls == 0
    with pytest.raises(ValueError, match="texts_sha256"):
        encode_to_store(_FakeEncoder(), texts[::-1], path, block_size=10, show_progress_bar=False)
    with pytest.raises(ValueError, match="dtype"):
        encode_to_store(_FakeEncoder(), texts, path, dtype="float16", show_progress_bar=False)
    fresh = encode_to_store(_FakeEncoder(), texts[::-1], path, resume=False, dtype="float16", show_progress_bar=False)
    assert fresh.dtype == np.float16
    np.testing.assert_allclose(fresh.read().astype(np.float32), _FakeEncoder.embed(texts[::-1]), rtol=1e-3)


def test_encode_to_store_refuses_foreign_files_and_bad_args(tmp_path):
    path = _save(tmp_path / "x.npy", np.zeros((3, 6), dtype=np.float32))
    with pytest.raises(FileExistsError, match="without a progress file"):
        encode_to_store(_FakeEncoder(), ["a", "b", "c"], path, show_progress_bar=False)
    with pytest.raises(ValueError, match="role"):
        encode_to_store(_FakeEncoder(), ["a"], tmp_path / "y.npy", role="passage")
    with pytest.raises(ValueError, match="dtype"):
        encode_to_store(_FakeEncoder(), ["a"], tmp_path / "y.npy", dtype="int8")
    with pytest.raises(ValueError, match="convert_to_tensor"):
        encode_to_store(_FakeEncoder(), ["a"], tmp_path / "y.npy", convert_to_tensor=True)


def test_encode_to_store_passes_the_pool_through(tmp_path):
    model = _FakeEncoder()
    pool = {"input": None, "output": None, "processes": []}
    encode_to_store(model, ["a", "b", "c"], tmp_path / "p.npy", pool=pool, chunk_size=2, show_progress_bar=False)
    assert model.kwargs[0]["pool"] is pool and model.kwargs[0]["chunk_size"] == 2


def test_encode_to_store_with_a_converted_model_keeps_roles(tiny_model_raw, sentences, tmp_path):
    # Given a qnorm-converted model, When its corpus is streamed to disk and searched from the file,
    # Then the results equal exact search on encode_query/encode_document in memory
    model = apply_similarity(tiny_model_raw, "qnorm")
    store = encode_to_store(model, sentences, tmp_path / "docs.npy", block_size=3, show_progress_bar=False)
    d = model.encode_document(sentences, convert_to_tensor=True)
    np.testing.assert_allclose(store.read(), d.numpy(), rtol=1e-5, atol=1e-6)
    q = model.encode_query(["protein cancer", "sleep coffee"], convert_to_tensor=True)
    ids = [f"d{i}" for i in range(len(sentences))]
    on_disk = exact_search(q, store, ["a", "b"], ids, 3, model.similarity)
    in_memory = exact_search(q, d, ["a", "b"], ids, 3, model.similarity)
    for qid in in_memory:
        assert list(on_disk[qid]) == list(in_memory[qid])
        assert on_disk[qid] == pytest.approx(in_memory[qid], abs=1e-5)


@pytest.mark.slow
def test_encode_to_store_with_st_multi_process_pool(tiny_model, sentences, tmp_path):
    pool = tiny_model.start_multi_process_pool(["cpu", "cpu"])
    try:
        store = encode_to_store(tiny_model, sentences, tmp_path / "mp.npy", pool=pool, show_progress_bar=False)
    finally:
        tiny_model.stop_multi_process_pool(pool)
    ref = tiny_model.encode_document(sentences)
    np.testing.assert_allclose(store.read(), ref, rtol=1e-5, atol=1e-6)


# ---- faiss (optional extra) ---------------------------------------------------------------------------------------


def test_faiss_inner_product_keeps_qnorm_scores():
    need_extra("faiss")
    from st_magnitude.evaluation import ann_search

    # Given qnorm scoring on documents with very different norms
    g = torch.Generator().manual_seed(0)
    q = torch.randn(20, 16, generator=g) * 3
    d = torch.randn(500, 16, generator=g) * torch.rand(500, 1, generator=g) * 5
    qids, cids = [f"q{i}" for i in range(20)], [f"d{j}" for j in range(500)]
    fn = get_similarity("qnorm")
    exact = exact_search(q, d, qids, cids, 10, fn)
    # When searched with faiss IndexFlatIP, Then the scores are the qnorm scores (not cosine) and the lists equal
    flat = ann_search(q, d, qids, cids, 10, fn, index="flat")
    cosine = get_similarity("cosine")(q, d)
    for qid, hits in exact.items():
        assert list(flat[qid]) == list(hits)
        assert flat[qid] == pytest.approx(hits, rel=1e-4, abs=1e-4)
        top = cids.index(next(iter(hits)))
        assert abs(hits[cids[top]] - float(cosine[int(qid[1:]), top])) > 1e-2
    # HNSW (inner product) reports its recall against exact search
    hnsw = ann_search(q, d, qids, cids, 10, fn, index="hnsw", ef_search=128)
    assert search_recall(hnsw, exact) >= 0.9
    with pytest.raises(ValueError, match="inner products only"):
        ann_search(q, d, qids, cids, 10, lambda a, b: -torch.cdist(a, b))
    with pytest.raises(ValueError, match="index must be one of"):
        ann_search(q, d, qids, cids, 10, index="ivf")


def test_search_recall():
    exact = {"q": {"a": 3.0, "b": 2.0, "c": 1.0}}
    assert search_recall({"q": {"a": 3.0, "c": 1.0, "x": 2.5}}, exact) == pytest.approx(2 / 3)
    assert search_recall({"q": {"a": 3.0, "x": 2.5}}, exact, k=2) == pytest.approx(1 / 2)
    assert search_recall({}, exact) == 0.0
