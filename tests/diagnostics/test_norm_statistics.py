"""Norm statistics, Cohen's d (labelled and label-free), CV and ΔCV (paper 000 §4.3, App. N.2)."""

from __future__ import annotations

import statistics

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from st_magnitude.diagnostics import (
    coefficient_of_variation,
    cohens_d,
    delta_cv,
    doc_norm_cohens_d,
    effect_size_band,
    norm_stats,
    pseudo_relevant_from_results,
)

floats = st.floats(0.1, 100, allow_nan=False)


@settings(max_examples=40, deadline=None)
@given(a=st.lists(floats, min_size=2, max_size=20), b=st.lists(floats, min_size=2, max_size=20))
def test_cohens_d_matches_textbook_formula(a, b):
    n1, n2 = len(a), len(b)
    pooled = ((n1 - 1) * statistics.variance(a) + (n2 - 1) * statistics.variance(b)) / (n1 + n2 - 2)
    if pooled < 1e-12:
        with pytest.raises(ValueError):
            cohens_d(a, b)
        return
    assert cohens_d(a, b) == pytest.approx((statistics.fmean(a) - statistics.fmean(b)) / pooled**0.5, rel=1e-9)


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
