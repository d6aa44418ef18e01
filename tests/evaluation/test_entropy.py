"""ContrastiveEntropyEvaluator against a brute-force reference with independently re-drawn negatives."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from st_magnitude.evaluation.entropy import (
    ContrastiveEntropyEvaluator,
    contrastive_entropy,
    sample_negatives,
)
from tests.conftest import WORDS


def _toy(n_docs=60, n_queries=5, seed=0):
    rng = np.random.default_rng(seed)
    corpus = {f"d{i:03d}": " ".join(rng.choice(WORDS, size=6)) for i in range(n_docs)}
    queries = {f"q{i}": " ".join(rng.choice(WORDS, size=3)) for i in range(n_queries)}
    qrels = {}
    for i, qid in enumerate(queries):
        docs = rng.choice(sorted(corpus), size=1 + i % 3, replace=False)
        qrels[qid] = {str(d): 1 for d in docs}
        qrels[qid]["d059"] = 0  # judged non-relevant: not a positive, may be sampled
    return corpus, queries, qrels


def _reference_negatives(qid, corpus, positives, n, seed):
    """The documented procedure, written out independently: uniform, no replacement, sorted pool minus positives."""
    pool = [c for c in sorted(corpus) if c not in positives]
    rng = np.random.default_rng([seed, zlib.crc32(qid.encode())])
    return [pool[i] for i in sorted(rng.choice(len(pool), size=n, replace=False))]


def _brute_force(model, corpus, queries, qrels, n, seed, scale, cosine):
    per_query = []
    for qid in sorted(queries):
        positives = sorted(d for d, r in qrels[qid].items() if r > 0)
        negs = _reference_negatives(qid, corpus, set(positives), n, seed)
        q = model.encode_query([queries[qid]])[0].astype(np.float64)
        P = model.encode_document([corpus[d] for d in positives]).astype(np.float64)
        N = model.encode_document([corpus[d] for d in negs]).astype(np.float64)

        def s(a, b):
            if cosine:
                return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))) * scale
            return float(a @ b) * scale

        values = []
        for p in P:
            num = math.exp(s(q, p))
            den = num + sum(math.exp(s(q, x)) for x in N)
            values.append(-math.log(num / den))
        per_query.append(sum(values) / len(values))
    return sum(per_query) / len(per_query)


@pytest.mark.parametrize(("similarity", "scale"), [("dot", 1.0), ("cosine", 50.0)])
def test_equals_brute_force_for_fixed_seed(tiny_model_raw, similarity, scale):
    corpus, queries, qrels = _toy()
    ev = ContrastiveEntropyEvaluator(
        queries, corpus, qrels, n_negatives=20, similarity=similarity, scale=scale, seed=7
    )
    metrics = ev(tiny_model_raw)
    ref = _brute_force(tiny_model_raw, corpus, queries, qrels, 20, 7, scale, similarity == "cosine")
    assert metrics["contrastive_entropy"] == pytest.approx(ref, rel=1e-5)
    assert metrics["n_queries"] == 5
    assert ev.primary_metric == "contrastive_entropy" and ev.greater_is_better is False


def test_model_similarity_default_uses_model_similarity(tiny_model):
    corpus, queries, qrels = _toy()
    a = ContrastiveEntropyEvaluator(queries, corpus, qrels, n_negatives=20, scale=50.0)(tiny_model)
    b = ContrastiveEntropyEvaluator(queries, corpus, qrels, n_negatives=20, similarity="cosine", scale=50.0)(
        tiny_model
    )
    assert a["contrastive_entropy"] == pytest.approx(b["contrastive_entropy"], rel=1e-5)


def test_negatives_exclude_positives_are_seeded_and_stable():
    corpus, queries, qrels = _toy()
    pos = {q: {d for d, r in r_.items() if r > 0} for q, r_ in qrels.items()}
    a = sample_negatives(sorted(queries), list(corpus), pos, 30, seed=1)
    b = sample_negatives(list(reversed(sorted(queries))), list(reversed(list(corpus))), pos, 30, seed=1)
    c = sample_negatives(sorted(queries), list(corpus), pos, 30, seed=2)
    assert a == b  # independent of query / corpus order
    assert a != c
    for q, negs in a.items():
        assert len(set(negs)) == 30 and not (set(negs) & pos[q])
    assert any("d059" in negs for negs in a.values())  # grade-0 judgments may be negatives


def test_prefix_and_csv(tiny_model_raw, tmp_path):
    corpus, queries, qrels = _toy()
    ev = ContrastiveEntropyEvaluator(queries, corpus, qrels, n_negatives=10, similarity="dot", name="toy")
    metrics = ev(tiny_model_raw, output_path=str(tmp_path))
    assert set(metrics) == {"toy_contrastive_entropy", "toy_n_queries"}
    assert ev.primary_metric == "toy_contrastive_entropy"
    assert (tmp_path / "contrastive_entropy_evaluation_toy_results.csv").read_text().count("\n") == 2


def test_errors():
    corpus, queries, qrels = _toy(n_docs=30)
    with pytest.raises(ValueError, match="lower n_negatives"):
        ContrastiveEntropyEvaluator(queries, corpus, qrels, n_negatives=256)
    with pytest.raises(ValueError, match="not in the corpus"):
        ContrastiveEntropyEvaluator(queries, corpus, {"q0": {"missing": 1}}, n_negatives=5)
    with pytest.raises(ValueError, match="no query has a positive"):
        ContrastiveEntropyEvaluator(queries, corpus, {"q0": {"d001": 0}}, n_negatives=5)
    with pytest.raises(ValueError, match="scale"):
        ContrastiveEntropyEvaluator(queries, corpus, qrels, n_negatives=5, scale=-1)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 4), st.integers(1, 40), st.integers(0, 10_000))
def test_function_matches_closed_form(k, n, seed):
    """Property: equals −mean_p log softmax over [s_p, s_neg] computed with numpy (and is ≥ 0)."""
    import torch

    rng = np.random.default_rng(seed)
    q = rng.standard_normal((1, 5))
    P = rng.standard_normal((k, 5))
    N = rng.standard_normal((n, 5))
    value, per_query = contrastive_entropy(torch.tensor(q), [torch.tensor(P)], [torch.tensor(N)], "dot", 2.0)
    s_neg = 2.0 * N @ q[0]
    expected = np.mean([np.logaddexp(2.0 * p @ q[0], np.logaddexp.reduce(s_neg)) - 2.0 * p @ q[0] for p in P])
    assert value == pytest.approx(expected, rel=1e-9) and value >= 0
    assert per_query == [pytest.approx(expected, rel=1e-9)]


def test_query_subset_uses_only_given_queries(tiny_model_raw):
    corpus, queries, qrels = _toy()
    subset = {q: queries[q] for q in ("q1", "q3")}
    ev = ContrastiveEntropyEvaluator(subset, corpus, qrels, n_negatives=10, similarity="dot")
    assert ev.query_ids == ["q1", "q3"]
    full = ContrastiveEntropyEvaluator(queries, corpus, qrels, n_negatives=10, similarity="dot")
    full(tiny_model_raw)
    value = ev(tiny_model_raw)["contrastive_entropy"]
    assert value == pytest.approx((full.per_query["q1"] + full.per_query["q3"]) / 2, rel=1e-6)


# --- a recipe leaves the model serving what it trained, and the evaluator reads τ from it ---
def test_bert_recipe_model_is_served_and_scored_with_raw_dot(tiny_model_raw):
    from st_magnitude.losses import BertRecipeLoss
    from st_magnitude.model.info import training_temperature
    from st_magnitude.modules.dimension_projection import add_dimension_projection

    model = tiny_model_raw
    add_dimension_projection(model, 48, seed=0)
    assert model.similarity_fn_name == "cosine"  # ST's default for a model without a saved similarity
    BertRecipeLoss(model)
    assert model.similarity_fn_name == "dot" and training_temperature(model) == 1.0
    corpus, queries, qrels = _toy()
    metrics = ContrastiveEntropyEvaluator(queries, corpus, qrels, n_negatives=20, seed=7)(model)  # all defaults
    ref = _brute_force(model, corpus, queries, qrels, 20, 7, scale=1.0, cosine=False)
    assert metrics["contrastive_entropy"] == pytest.approx(ref, rel=1e-5)
    cosine_at_1 = _brute_force(model, corpus, queries, qrels, 20, 7, scale=1.0, cosine=True)
    assert metrics["contrastive_entropy"] != pytest.approx(cosine_at_1, rel=1e-5)  # what the old defaults computed


def test_ettin_recipe_temperature_reaches_the_evaluator(tiny_model):
    from st_magnitude.losses import EttinRecipeLoss
    from st_magnitude.model.info import training_temperature

    EttinRecipeLoss(tiny_model, temperature=0.02)
    assert tiny_model.similarity_fn_name == "cosine" and training_temperature(tiny_model) == 0.02
    corpus, queries, qrels = _toy()
    ev = ContrastiveEntropyEvaluator(queries, corpus, qrels, n_negatives=20, seed=7)
    metrics = ev(tiny_model)
    assert ev.last_scale == pytest.approx(50.0)
    ref = _brute_force(tiny_model, corpus, queries, qrels, 20, 7, scale=50.0, cosine=True)
    assert metrics["contrastive_entropy"] == pytest.approx(ref, rel=1e-5)
    # an explicit scale still wins
    explicit = ContrastiveEntropyEvaluator(queries, corpus, qrels, n_negatives=20, seed=7, scale=1.0)
    explicit(tiny_model)
    assert explicit.last_scale == 1.0


def test_cosine_model_without_recorded_temperature_warns(tiny_model):
    corpus, queries, qrels = _toy()
    ev = ContrastiveEntropyEvaluator(queries, corpus, qrels, n_negatives=20, seed=7)
    with pytest.warns(UserWarning, match="no training temperature"):
        ev(tiny_model)
    assert ev.last_scale == 1.0


def test_evaluator_refuses_truncate_dim_after_normalisation(tiny_model):
    from st_magnitude import apply_similarity

    with pytest.warns(Warning):
        apply_similarity(tiny_model, "dnorm")
    tiny_model.truncate_dim = 16
    corpus, queries, qrels = _toy()
    with pytest.raises(ValueError, match="truncate_model"):
        ContrastiveEntropyEvaluator(queries, corpus, qrels, n_negatives=20, scale=1.0)(tiny_model)


def test_model_similarity_adapter_claims_no_gammas(tiny_model):
    """``similarity=None`` scores with ``model.similarity``: the adapter has both forms and no (fake) γ."""
    import torch

    from st_magnitude.evaluation.entropy import _ModelSimilarity
    from st_magnitude.similarity import PowerNormSimilarity, Similarity

    sim = _ModelSimilarity(tiny_model)
    assert isinstance(sim, Similarity) and not isinstance(sim, PowerNormSimilarity)
    assert not hasattr(sim, "gammas") and not hasattr(sim, "gamma_query")  # it reported (0.0, 0.0) before
    q, d = torch.randn(3, 8), torch.randn(3, 8)
    torch.testing.assert_close(sim(q, d), tiny_model.similarity(q, d))
    torch.testing.assert_close(sim.pairwise(q, d), tiny_model.similarity_pairwise(q, d))
    assert sim.symmetric and sim.get_config_dict() == {"name": "model"}
