"""Pooled ROC-AUC (paper 001 §6): equals sklearn on the pooled scores; pooled vs per-query under score shifts."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score

from st_magnitude.evaluation import PooledAUCEvaluator
from st_magnitude.evaluation.auc import per_query_auc, pooled_auc_pools, pooled_auc_score


@settings(max_examples=60, deadline=None)
@given(
    pos=st.lists(st.integers(-5, 5), min_size=1, max_size=30),
    neg=st.lists(st.integers(-5, 5), min_size=1, max_size=30),
)
def test_pooled_auc_equals_sklearn_with_ties(pos, neg):
    # integer scores force ties; sklearn counts them as 1/2
    y = np.r_[np.ones(len(pos)), np.zeros(len(neg))]
    assert pooled_auc_score(pos, neg) == pytest.approx(roc_auc_score(y, np.r_[pos, neg]), abs=1e-12)


def test_pooled_auc_needs_both_classes():
    with pytest.raises(ValueError, match="at least one positive and one negative"):
        pooled_auc_score([], [0.1])


def _setup(seed=0, nq=5, nd=40, n=16):
    g = torch.Generator().manual_seed(seed)
    q, d = torch.randn(nq, n, generator=g), torch.randn(nd, n, generator=g)
    qids, cids = [f"q{i}" for i in range(nq)], [f"d{j}" for j in range(nd)]
    qrels = {f"q{i}": {f"d{(3 * i + k) % nd}": 1 for k in range(1 + i % 3)} for i in range(nq)}
    return q, d, qids, cids, qrels


def test_pools_follow_the_protocol_brute_force():
    # all positives, plus the top-n non-positive scores per query
    q, d, qids, cids, qrels = _setup()
    n_neg = 7
    pools = pooled_auc_pools(q, d, qids, cids, qrels, n_negatives=n_neg)
    scores = (q @ d.T).numpy()
    exp_pos, exp_neg = [], []
    for i, qid in enumerate(qids):
        rel = {cids.index(c) for c in qrels[qid]}
        exp_pos += [scores[i, j] for j in sorted(rel)]
        exp_neg += sorted((scores[i, j] for j in range(len(cids)) if j not in rel), reverse=True)[:n_neg]
    np.testing.assert_allclose(np.sort(pools.positives), np.sort(exp_pos), rtol=1e-6)
    np.testing.assert_allclose(np.sort(pools.negatives), np.sort(exp_neg), rtol=1e-6)
    y = np.r_[np.ones(len(exp_pos)), np.zeros(len(exp_neg))]
    assert pooled_auc_score(pools.positives, pools.negatives) == pytest.approx(
        roc_auc_score(y, np.r_[exp_pos, exp_neg]), abs=1e-9
    )


def test_per_query_shift_changes_pooled_but_not_per_query_auc():
    # paper 001 Fig. 3 logic: adding a per-query constant keeps every ranking (per-query AUC) but moves the pools
    q, d, qids, cids, qrels = _setup(seed=3)
    base = pooled_auc_pools(q, d, qids, cids, qrels, n_negatives=10)
    shift = torch.tensor([0.0, 5.0, -3.0, 10.0, -8.0])

    def shifted(qq, dd):
        return qq @ dd.T + shift[: len(qq), None]

    moved = pooled_auc_pools(q, d, qids, cids, qrels, shifted, n_negatives=10)
    assert per_query_auc(moved) == pytest.approx(per_query_auc(base), abs=1e-12)
    assert pooled_auc_score(moved.positives, moved.negatives) != pytest.approx(
        pooled_auc_score(base.positives, base.negatives), abs=1e-3
    )


def test_query_magnitude_changes_pooled_auc_only():
    # qnorm vs dot: same per-query rankings (paper 000 Prop. 4.1), different cross-query calibration
    from st_magnitude.similarity import get_similarity

    q, d, qids, cids, qrels = _setup(seed=5)
    q = q * torch.linspace(0.2, 5.0, len(q))[:, None]
    dot = pooled_auc_pools(q, d, qids, cids, qrels, get_similarity("dot"), n_negatives=10)
    qn = pooled_auc_pools(q, d, qids, cids, qrels, get_similarity("qnorm"), n_negatives=10)
    assert per_query_auc(dot) == pytest.approx(per_query_auc(qn), abs=1e-12)
    assert pooled_auc_score(dot.positives, dot.negatives) != pytest.approx(
        pooled_auc_score(qn.positives, qn.negatives), abs=1e-4
    )


def test_identical_ids_are_not_negatives():
    q = torch.tensor([[1.0, 0.0]])
    d = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.1, 0.9]])
    pools = pooled_auc_pools(q, d, ["x"], ["x", "a", "b"], {"x": {"a": 1}}, n_negatives=5)
    assert len(pools.negatives) == 1  # only "b": "x" is the query itself, "a" the positive
    pools = pooled_auc_pools(q, d, ["x"], ["x", "a", "b"], {"x": {"a": 1}}, n_negatives=5, ignore_identical_ids=False)
    assert len(pools.negatives) == 2


def test_evaluator_writes_csv_and_roc_png(tiny_model, sentences, tmp_path):
    corpus = {f"d{i}": s for i, s in enumerate(sentences)}
    queries = {"q0": "protein cancer", "q1": "heart vitamin diet", "q2": "sleep coffee"}
    qrels = {"q0": {"d0": 1}, "q1": {"d1": 1, "d5": 1}, "q2": {"d2": 1}}
    ev = PooledAUCEvaluator(queries, corpus, qrels, n_negatives=3, name="toy")
    out = ev(tiny_model, output_path=str(tmp_path))
    assert ev.primary_metric == "toy_pooled_auc"
    assert 0.0 <= out["toy_pooled_auc"] <= 1.0
    assert out["toy_n_negatives"] == 9 and out["toy_n_positives"] == 4
    assert (tmp_path / "roc_toy.png").stat().st_size > 1000
    assert (tmp_path / "pooled_auc_toy.csv").read_text().startswith("epoch,steps")
    with pytest.raises(ValueError, match="n_negatives must be a positive integer"):
        PooledAUCEvaluator(queries, corpus, qrels, n_negatives=0)
