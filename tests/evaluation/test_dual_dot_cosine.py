"""Dual dot/cosine evaluation and the magnitude-collapse detector (paper 000 App. N.3)."""

from __future__ import annotations

import warnings

import pytest
import torch

from st_magnitude.evaluation import DualSimilarityEvaluator
from st_magnitude.evaluation.dual import MagnitudeCollapseDetected


def _data(n_q=8, n_d=40):
    queries = {f"q{i}": f"query {i}" for i in range(n_q)}
    corpus = {f"d{j}": f"doc {j}" for j in range(n_d)}
    qrels = {f"q{i}": {f"d{i}": 1} for i in range(n_q)}
    return queries, corpus, qrels


def _embeddings(collapsed: bool, seed=0, n_q=8, n_d=40, dim=16):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(n_q, dim, generator=g).abs()
    d = torch.randn(n_d, dim, generator=g)
    if collapsed:  # directions carry nothing, relevance is in the norms of the relevant documents
        d = d.abs()
        d[:n_q] = d[:n_q] / d[:n_q].norm(dim=-1, keepdim=True) * 50
    else:  # directions carry relevance, norms are equal
        d[:n_q] = q + 0.05 * torch.randn(n_q, dim, generator=g)
        d = d / d.norm(dim=-1, keepdim=True)
    return q, d


def test_dot_and_cosine_on_same_embeddings_and_gap_warning():
    ev = DualSimilarityEvaluator(*_data(), name="val")
    q, d = _embeddings(collapsed=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", MagnitudeCollapseDetected)
        healthy = ev.evaluate_embeddings(q, d)
    assert healthy["dot_ndcg@10"] == pytest.approx(healthy["cosine_ndcg@10"])  # unit norms: dot == cosine
    q2, d2 = _embeddings(collapsed=True)
    with pytest.warns(MagnitudeCollapseDetected, match="magnitude collapse"):
        bad = ev.evaluate_embeddings(q2, d2)
    assert bad["dot_minus_cosine"] > 0.1 and bad["collapse"] == 1.0


def test_trend_detector_cosine_falls_while_dot_rises():
    ev = DualSimilarityEvaluator(*_data(), gap_threshold=10.0, drop_tol=0.02)
    ev.history.append({"dot_ndcg@10": 0.1, "cosine_ndcg@10": 0.9, "dot_minus_cosine": -0.8, "collapse": 0.0})
    q, d = _embeddings(collapsed=True)
    with pytest.warns(MagnitudeCollapseDetected, match="cosine nDCG@10 fell"):
        ev.evaluate_embeddings(q, d)


def test_evaluator_call_on_model(tiny_model, sentences):
    corpus = {f"d{i}": s for i, s in enumerate(sentences)}
    ev = DualSimilarityEvaluator({"q": "protein cancer"}, corpus, {"q": {"d0": 1}}, name="v", main="cosine")
    out = ev(tiny_model)
    assert ev.primary_metric == "v_cosine_ndcg@10"
    assert out["v_dot_ndcg@10"] == pytest.approx(out["v_cosine_ndcg@10"])  # tiny_model ends in Normalize


def test_bad_arguments_name_allowed_values():
    with pytest.raises(ValueError, match=r"\('dot', 'cosine'\)"):
        DualSimilarityEvaluator(*_data(), main="qnorm")
