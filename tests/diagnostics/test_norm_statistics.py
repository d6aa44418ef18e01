"""Norm statistics, Cohen's d (labelled and label-free), CV and ΔCV (paper 000 §4.3, App. N.2)."""

from __future__ import annotations

import statistics

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from st_magnitude.diagnostics import doc_norm_cohens_d, norm_stats
from st_magnitude.diagnostics.norms import (
    coefficient_of_variation,
    cohens_d,
    delta_cv,
    effect_size_band,
    label_free_doc_norm_cohens_d,
    pseudo_relevant_from_results,
)

floats = st.floats(0.1, 100, allow_nan=False)


@settings(max_examples=40, deadline=None)
@given(a=st.lists(floats, min_size=2, max_size=20), b=st.lists(floats, min_size=2, max_size=20))
def test_cohens_d_matches_textbook_formula(a, b):
    n1, n2 = len(a), len(b)
    pooled = ((n1 - 1) * statistics.variance(a) + (n2 - 1) * statistics.variance(b)) / (n1 + n2 - 2)
    if pooled**0.5 <= 1e-9 * max(map(abs, a + b)):  # zero up to float rounding (e.g. [0.1, 0.1] vs [0.1, 0.1 + ulp])
        with pytest.raises(ValueError, match="zero variance"):
            cohens_d(a, b)
        return
    assert cohens_d(a, b) == pytest.approx((statistics.fmean(a) - statistics.fmean(b)) / pooled**0.5, rel=1e-9)


def test_cohens_d_refuses_rounding_noise_as_variance():
    """Equal values up to one ulp have a pooled std of ~1e-17: d from that is noise over noise, not an effect."""
    with pytest.raises(ValueError, match="zero variance"):
        cohens_d([0.1, 0.1], [0.1, 0.10000000000000002])
    assert cohens_d([0.1, 0.2], [0.1, 0.10000000000000002]) == pytest.approx(0.05 / (0.005 / 2) ** 0.5, rel=1e-6)


def test_cv_and_delta_cv():
    x = [1.0, 2.0, 3.0, 4.0]
    assert coefficient_of_variation(x) == pytest.approx(100 * statistics.stdev(x) / statistics.fmean(x))
    assert delta_cv(2.0, 7.0) == pytest.approx(3.5)
    with pytest.raises(ValueError, match="reference CV must be positive"):
        delta_cv(0.0, 1.0)


def test_norm_stats_summary():
    s = norm_stats(np.array([1.0, 3.0]))
    assert s["n"] == 2 and s["mean"] == 2.0 and s["min"] == 1.0 and s["max"] == 3.0
    assert s["cv_percent"] == pytest.approx(100 * statistics.stdev([1, 3]) / 2)


def test_doc_norm_cohens_d_labelled_split_and_errors():
    norms = {"a": 5.0, "b": 6.0, "c": 1.0, "d": 2.0, "e": 1.5}
    d, n_rel, n_irr = doc_norm_cohens_d(norms, ["a", "b", "zz"])
    assert (n_rel, n_irr) == (2, 3) and d == pytest.approx(cohens_d([5, 6], [1, 2, 1.5]))
    assert (
        effect_size_band(d) == "large" and effect_size_band(-0.3) == "small" and effect_size_band(0.1) == "negligible"
    )
    with pytest.raises(ValueError, match="every document relevant"):
        doc_norm_cohens_d(norms, list(norms))


def test_label_free_pseudo_relevant_is_top_k_union():
    res = {"q1": {"a": 3.0, "b": 2.0, "c": 1.0}, "q2": {"c": 9.0, "d": 0.0}}
    assert pseudo_relevant_from_results(res, k=1) == {"a", "c"}
    assert pseudo_relevant_from_results(res, k=2) == {"a", "b", "c", "d"}
    with pytest.raises(ValueError, match="k must be positive"):
        pseudo_relevant_from_results(res, k=0)


def _no_signal_corpus(seed=0, n_docs=5000, n_queries=100, dim=16):
    """Norms drawn independently of everything: relevance is purely directional (labelled d ≈ 0 by design)."""
    rng = np.random.default_rng(seed)
    dirs = rng.normal(size=(n_docs, dim))
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    norms = rng.lognormal(0.0, 0.4, size=n_docs)
    docs = dirs * norms[:, None]
    relevant = rng.choice(n_docs, size=(n_queries, 3), replace=False)
    queries = dirs[relevant].sum(1) + 0.3 * rng.normal(size=(n_queries, dim))
    queries *= rng.lognormal(0.0, 0.3, size=(n_queries, 1))
    return queries, docs, norms, {str(i) for i in relevant.ravel()}


def test_label_free_d_is_zero_when_norms_carry_no_relevance_signal():
    # With top-k by dot (or qnorm, the same ranking per query) as pseudo-labels the label-free d
    # was +2.41 although norms carried no signal. Ranking by cosine cannot select documents for their norm.
    q, docs, norms, relevant = _no_signal_corpus()
    doc_norms = {str(i): float(v) for i, v in enumerate(norms)}
    labelled = doc_norm_cohens_d(doc_norms, relevant)[0]
    assert abs(labelled) < 0.15
    dot = q @ docs.T
    top = np.argsort(-dot, axis=1)[:, :20]
    circular = pseudo_relevant_from_results(
        {str(a): {str(j): float(dot[a, j]) for j in row} for a, row in enumerate(top)}, k=10
    )
    assert doc_norm_cohens_d(doc_norms, circular)[0] > 1.0  # the circular construction the mode must not use
    d, n_pseudo, n_rest = label_free_doc_norm_cohens_d(q, docs, k=10)
    assert abs(d) < 0.15, d
    assert n_pseudo + n_rest == len(docs) and 800 <= n_pseudo <= 1000


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(1, 4))
def test_label_free_d_matches_loop_reference_and_ignores_document_scale(seed, k):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(5, 4))
    docs = rng.normal(size=(30, 4))
    scale = rng.uniform(0.05, 20.0, size=(30, 1))
    # reference: per query, sort documents by cosine with plain Python loops
    pseudo = set()
    for qi in q:
        cos = [float(qi @ dj / (np.linalg.norm(qi) * np.linalg.norm(dj))) for dj in docs]
        pseudo.update(sorted(range(len(docs)), key=lambda j: -cos[j])[:k])
    for mat in (docs, docs * scale):  # rescaling documents changes the norms, never the pseudo-relevant set
        norms = np.linalg.norm(mat, axis=1)
        rest = [j for j in range(len(docs)) if j not in pseudo]
        d, n_pseudo, n_rest = label_free_doc_norm_cohens_d(q, mat, k=k)
        assert (n_pseudo, n_rest) == (len(pseudo), len(rest))
        assert d == pytest.approx(cohens_d(norms[sorted(pseudo)], norms[rest]), rel=1e-9, abs=1e-12)


def test_label_free_d_input_errors():
    with pytest.raises(ValueError, match="k must be positive"):
        label_free_doc_norm_cohens_d(np.ones((2, 3)), np.ones((4, 3)), k=0)
    with pytest.raises(ValueError, match=r"\[Q, n\] queries and \[M, n\] documents"):
        label_free_doc_norm_cohens_d(np.ones((2, 3)), np.ones((4, 2)))
    with pytest.raises(ValueError, match="two pseudo-relevant and two other"):
        label_free_doc_norm_cohens_d(np.eye(3), np.eye(3) * [[1.0], [2.0], [3.0]], k=1)
