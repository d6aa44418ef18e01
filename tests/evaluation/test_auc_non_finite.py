"""The pooled AUC never reads NaN or inf as "no negatives": a non-finite embedding or score is refused first, naming
the query or document (index and id) and what to check."""

from __future__ import annotations

import pytest
import torch

from st_magnitude.evaluation import PooledAUCEvaluator
from st_magnitude.evaluation.auc import pooled_auc_pools, pooled_auc_score


def _data(nq=4, nd=12, dim=8):
    g = torch.Generator().manual_seed(0)
    q, d = torch.randn(nq, dim, generator=g), torch.randn(nd, dim, generator=g)
    queries = {f"q{i}": f"query {i}" for i in range(nq)}
    corpus = {f"d{j}": f"doc {j}" for j in range(nd)}
    qrels = {f"q{i}": {f"d{i}": 1} for i in range(nq)}
    return q, d, queries, corpus, qrels


def _evaluate(q, d, queries, corpus, qrels):
    evaluator = PooledAUCEvaluator(queries, corpus, qrels, n_negatives=5, write_png=False)
    return evaluator.evaluate_embeddings(q, d, lambda a, b: a @ b.T)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_non_finite_query_embedding_is_named(value):
    q, d, queries, corpus, qrels = _data()
    q[2, 3] = value
    with pytest.raises(ValueError) as info:
        _evaluate(q, d, queries, corpus, qrels)
    message = str(info.value)
    assert "query embedding at index 2 (id 'q2')" in message and "NaN or inf" in message, message
    assert "at least one positive" not in message


def test_nan_everywhere_is_named_not_read_as_no_negatives():
    q, d, queries, corpus, qrels = _data()
    q[:], d[:] = float("nan"), float("nan")
    with pytest.raises(ValueError, match=r"query embedding at index 0 \(id 'q0'\) holds NaN or inf \(4 of 4"):
        _evaluate(q, d, queries, corpus, qrels)


def test_a_non_finite_document_embedding_is_named():
    q, d, queries, corpus, qrels = _data()
    d[7] = float("nan")
    with pytest.raises(ValueError, match=r"document embedding at index 7 \(id 'd7'\) holds NaN or inf \(1 of 12"):
        pooled_auc_pools(q, d, list(queries), list(corpus), qrels, n_negatives=5)


def test_finite_embeddings_whose_scores_overflow_are_named():
    q, d, queries, corpus, qrels = _data()
    q[:] *= 1e20
    d[:] *= 1e20  # float32 products past 3.4e38: the scores are inf
    with pytest.raises(ValueError, match=r"the scores of the query at index 0 \(id 'q0'\) .*NaN or inf"):
        pooled_auc_pools(q, d, list(queries), list(corpus), qrels, n_negatives=5)


def test_non_finite_scores_are_refused_by_the_auc_itself():
    with pytest.raises(ValueError, match="1 of 2 positive scores are NaN or inf"):
        pooled_auc_score([float("nan"), 1.0], [0.0])
    with pytest.raises(ValueError, match="1 of 1 negative scores are NaN or inf"):
        pooled_auc_score([1.0], [float("-inf")])
