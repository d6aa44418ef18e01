"""Exact search vs a brute-force loop; metrics vs ST's InformationRetrievalEvaluator; roles are honoured."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from st_magnitude import apply_similarity
from st_magnitude.evaluation import RoleIREvaluator, exact_search
from st_magnitude.evaluation.ir import retrieval_metrics
from st_magnitude.similarity import get_similarity


def _brute_force(q, d, qids, cids, k, fn, ignore_identical):
    out = {}
    for i, qid in enumerate(qids):
        scored = []
        for j, cid in enumerate(cids):
            if ignore_identical and cid == qid:
                continue
            scored.append((float(fn(q[i : i + 1], d[j : j + 1])[0, 0]), cid))
        scored.sort(key=lambda x: -x[0])
        out[qid] = dict((c, s) for s, c in scored[:k])
    return out


@settings(max_examples=30, deadline=None)
@given(
    nq=st.integers(1, 6),
    nd=st.integers(1, 30),
    k=st.integers(1, 12),
    seed=st.integers(0, 1000),
    sim=st.sampled_from(["dot", "cosine", "qnorm", "dnorm"]),
    chunk=st.sampled_from([None, 1, 4]),
)
def test_exact_search_matches_brute_force(nq, nd, k, seed, sim, chunk):
    # Given random embeddings (continuous, so no ties) and ids where some query ids equal document ids
    g = torch.Generator().manual_seed(seed)
    q, d = torch.randn(nq, 8, generator=g), torch.randn(nd, 8, generator=g) * torch.rand(nd, 1, generator=g) * 3
    qids = [f"x{i}" for i in range(nq)]
    cids = [f"x{j}" for j in range(nd)]
    fn = get_similarity(sim)
    for ignore in (True, False):
        # When searching, Then the top-k sets and scores are those of the loop
        got = exact_search(q, d, qids, cids, k, fn, ignore_identical_ids=ignore, query_chunk_size=chunk)
        ref = _brute_force(q, d, qids, cids, k, fn, ignore)
        assert got.keys() == ref.keys()
        for qid in ref:
            assert set(got[qid]) == set(ref[qid])
            for cid, s in ref[qid].items():
                assert math.isclose(got[qid][cid], s, rel_tol=1e-5, abs_tol=1e-5)


def test_exact_search_validates_inputs():
    with pytest.raises(ValueError, match="corpus is empty"):
        exact_search(torch.randn(2, 4), torch.zeros(0, 4), ["a", "b"], [], 3)
    with pytest.raises(ValueError, match="differ in length"):
        exact_search(torch.randn(2, 4), torch.randn(3, 4), ["a"], ["x", "y", "z"], 3)


def test_nan_scores_warn_and_rank_last():
    q = torch.tensor([[1.0, 0.0]])
    d = torch.tensor([[1.0, 0.0], [float("nan"), 0.0], [0.5, 0.0]])
    with pytest.warns(RuntimeWarning, match="NaN"):
        res = exact_search(q, d, ["q"], ["a", "b", "c"], 3)
    assert list(sorted(res["q"], key=lambda c: -res["q"][c]))[:2] == ["a", "c"]


def test_metrics_agree_with_sentence_transformers_ir_evaluator(tiny_model, sentences):
    # Given a tiny corpus, When our evaluator and ST's InformationRetrievalEvaluator score the same model,
    # Then nDCG@k / MRR@k / Recall@k agree (ST computes them itself; we use pytrec_eval via BEIR)
    from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator

    corpus = {f"d{i}": s for i, s in enumerate(sentences)}
    queries = {"q0": "protein cancer", "q1": "heart vitamin diet", "q2": "sleep coffee"}
    qrels = {"q0": {"d0"}, "q1": {"d1", "d5"}, "q2": {"d2"}}
    ours = RoleIREvaluator(queries, corpus, qrels, ndcg_at_k=(3,), recall_at_k=(3,), mrr_at_k=(3,))(tiny_model)
    st_eval = InformationRetrievalEvaluator(
        queries,
        corpus,
        qrels,
        ndcg_at_k=[3],
        mrr_at_k=[3],
        precision_recall_at_k=[3],
        accuracy_at_k=[1],
        map_at_k=[3],
        write_csv=False,
    )(tiny_model)
    assert ours["ndcg@3"] == pytest.approx(st_eval["cosine_ndcg@3"], abs=1e-4)
    assert ours["mrr@3"] == pytest.approx(st_eval["cosine_mrr@3"], abs=1e-4)
    assert ours["recall@3"] == pytest.approx(st_eval["cosine_recall@3"], abs=1e-4)


def test_qnorm_model_is_scored_with_its_roles(tiny_model_raw, sentences):
    # Given a qnorm-converted model, When evaluated, Then scores equal qnorm on the raw embeddings
    corpus = {f"d{i}": s for i, s in enumerate(sentences)}
    queries = {"q0": "protein cancer", "q1": "heart vitamin diet"}
    qrels = {"q0": {"d0": 1}, "q1": {"d1": 1}}
    raw = RoleIREvaluator(queries, corpus, qrels, similarity="qnorm")
    raw_metrics = raw(tiny_model_raw)
    raw_results = raw.last_results
    model = apply_similarity(tiny_model_raw, "qnorm")
    ev = RoleIREvaluator(queries, corpus, qrels)
    assert ev(model) == raw_metrics
    for qid in raw_results:
        for cid, s in raw_results[qid].items():
            assert ev.last_results[qid][cid] == pytest.approx(s, abs=1e-5)
    q = model.encode_query(["protein cancer"], convert_to_tensor=True)
    assert torch.linalg.vector_norm(q, dim=-1).item() == pytest.approx(1.0, abs=1e-5)


def test_evaluator_rejects_bad_inputs(sentences):
    corpus = {f"d{i}": s for i, s in enumerate(sentences)}
    with pytest.raises(ValueError, match="missing from the corpus"):
        RoleIREvaluator({"q": "x"}, corpus, {"q": {"ghost": 1}})
    with pytest.raises(ValueError, match="corpus is empty"):
        RoleIREvaluator({"q": "x"}, {}, {"q": {"d0": 1}})
    with pytest.raises(ValueError, match="no text"):
        RoleIREvaluator({}, corpus, {"q": {"d0": 1}})


def test_retrieval_metrics_do_not_modify_results():
    res = {"q": {"q": 1.0, "a": 0.5}}
    retrieval_metrics({"q": {"a": 1}}, res)
    assert res == {"q": {"q": 1.0, "a": 0.5}}
