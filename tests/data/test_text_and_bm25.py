"""st_magnitude.data: the one title + text join and the one BM25 (scaling teacher and Revela grouping)."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from st_magnitude.data.bm25 import BM25Scorer, bm25_scores, tokenize
from st_magnitude.data.text import doc_text


def test_doc_text_joins_title_and_text_as_mteb():
    assert doc_text({"title": "T", "text": "body "}) == "T body"
    assert doc_text({"title": "", "text": " body "}) == "body"
    assert doc_text({"title": None, "text": None}) == ""
    assert doc_text({"text": "only"}) == "only"
    assert doc_text("plain string ") == "plain string "
    assert doc_text({"title": "T", "text": "b"}, sep=". ") == "T. b"


def test_all_callers_share_the_join():
    from st_magnitude.data.beir import doc_text as integrations_doc_text
    from st_magnitude.evaluation.ir import doc_texts

    corpus = {"a": {"title": "T", "text": "x"}, "b": {"title": "", "text": "y "}, "c": "z"}
    assert integrations_doc_text is doc_text
    assert doc_texts(corpus, ["a", "b", "c"]) == ["T x", "y", "z"]
    assert doc_texts(corpus, ["a"], sep=" | ") == ["T | x"]


def test_revela_join_keeps_the_final_period():
    """Revela joins with ". " (the title is a sentence); the document's last period is kept (it was stripped)."""
    from st_magnitude.data.revela import _as_texts

    corpus = {"d": {"title": "Title", "text": "First sentence. Last one."}, "e": {"title": "", "text": "Only."}}
    assert _as_texts(corpus) == ["Title. First sentence. Last one.", "Only."]


def _bm25_loop(query_terms, doc, docs, k1=0.9, b=0.4):
    """The BM25 formula term by term (module docstring), over tokenised documents."""
    avgdl = sum(len(d) for d in docs) / len(docs)
    tf = Counter(doc)
    total = 0.0
    for term in query_terms:
        df = sum(term in d for d in docs)
        if df == 0 or tf[term] == 0:
            continue
        idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
        total += idf * tf[term] * (k1 + 1) / (tf[term] + k1 * (1 - b + b * len(doc) / avgdl))
    return total


_doc = st.lists(st.sampled_from(["cell", "gene", "Heart", "blood", "sleep", "tea", "a", "the"]), max_size=12).map(
    " ".join
)


@settings(max_examples=40, deadline=None)
@given(docs=st.lists(_doc, min_size=1, max_size=8), query=_doc, k1=st.floats(0, 3), b=st.floats(0, 1))
def test_scorer_and_matrix_match_the_formula(docs, query, k1, b):
    toks = [tokenize(d) for d in docs]
    scorer = BM25Scorer({str(i): d for i, d in enumerate(docs)}, k1=k1, b=b)
    expected = [_bm25_loop(tokenize(query), t, toks, k1, b) for t in toks]  # query terms with repeats
    np.testing.assert_allclose(scorer.scores(query), expected, rtol=1e-12, atol=1e-12)
    matrix = [[_bm25_loop(sorted(set(q)), d, toks, k1, b) for d in toks] for q in toks]  # distinct terms
    np.testing.assert_allclose(bm25_scores(docs, k1=k1, b=b), matrix, rtol=1e-5, atol=1e-6)
    assert bm25_scores(docs).dtype == np.float32


def test_matrix_row_is_the_scorer_on_distinct_terms():
    docs = ["heart heart blood", "sleep tea tea", "blood sugar heart"]
    scorer = BM25Scorer({str(i): d for i, d in enumerate(docs)})
    for i, d in enumerate(docs):
        np.testing.assert_allclose(scorer.corpus_scores()[i], scorer.scores(" ".join(set(tokenize(d)))), rtol=1e-12)


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="at least one document"):
        bm25_scores([])
    with pytest.raises(ValueError, match=r"k1 must be a finite number >= 0"):
        bm25_scores(["a"], k1=-1)
