"""Okapi BM25, one implementation for the dimension-scaling teacher and Revela's BM25 grouping.

Lucene's BM25::

    score(q, d) = Σ_{t ∈ q} idf(t) · tf(t,d)·(k1+1) / (tf(t,d) + k1·(1 − b + b·|d|/avgdl))
    idf(t)      = ln(1 + (N − df(t) + 0.5) / (df(t) + 0.5))

Defaults k1 = 0.9, b = 0.4 (Anserini's BEIR defaults). Tokenisation: lower-cased ``\\w+`` runs.

* :class:`BM25Scorer` scores text queries against a fixed corpus; a query term counts as often as it occurs (as
  in Lucene's bag-of-words query). Paper 003 distils from a cross-encoder that cannot be downloaded offline; BM25
  is the stand-in teacher and hard-negative miner of ``examples/dim_sweep.py`` (say so in results).
* :func:`bm25_scores` scores every document against every other, a document used as a query being the set of its
  *distinct* terms (Revela's ``grouping="bm25"``, :func:`st_magnitude.data.revela.build_revela_dataset`).
"""

from __future__ import annotations

import logging
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np
from scipy import sparse

logger = logging.getLogger(__name__)

_TOKEN = re.compile(r"\w+", re.UNICODE)


def tokenize(text: str) -> list[str]:
    """Lower-cased ``\\w+`` tokens."""
    return _TOKEN.findall(text.lower())


class BM25Scorer:
    """BM25 over a fixed corpus; ``scorer(queries, passages)`` scores aligned (query, passage) text pairs.

    Args:
        corpus: ``{doc_id: text}``; statistics (df, avgdl) come from it. Passages scored by text that are not in
            the corpus are tokenised on the fly with the same statistics.
        k1, b: BM25 parameters (k1 ≥ 0, 0 ≤ b ≤ 1).
    """

    def __init__(self, corpus: Mapping[str, str], k1: float = 0.9, b: float = 0.4) -> None:
        if not corpus:
            raise ValueError("corpus is empty")
        if not (k1 >= 0 and math.isfinite(k1)):
            raise ValueError(f"k1 must be a finite number >= 0, got {k1!r}")
        if not (0 <= b <= 1):
            raise ValueError(f"b must lie in [0, 1], got {b!r}")
        self.k1, self.b = float(k1), float(b)
        self.doc_ids = list(corpus)
        self.texts = [corpus[d] for d in self.doc_ids]
        self._text_index = {t: i for i, t in enumerate(self.texts)}
        docs = [Counter(tokenize(t)) for t in self.texts]
        self.vocab: dict[str, int] = {}
        rows, cols, vals = [], [], []
        for i, counts in enumerate(docs):
            for term, tf in counts.items():
                rows.append(i)
                cols.append(self.vocab.setdefault(term, len(self.vocab)))
                vals.append(tf)
        n_docs = len(docs)
        #: ``[n_docs, vocab]`` term frequencies.
        self.tf = sparse.csr_matrix((vals, (rows, cols)), shape=(n_docs, len(self.vocab)), dtype=np.float64)
        self.doc_len = np.asarray(self.tf.sum(axis=1)).ravel()
        self.avgdl = float(self.doc_len.mean()) or 1.0
        df = np.bincount(self.tf.indices, minlength=len(self.vocab))
        self.idf = np.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))
        self.n_docs = n_docs
        # precomputed per-(doc, term) BM25 weights: idf · tf(k1+1)/(tf + k1(1−b+b·len/avgdl))
        weights = self.tf.tocoo()
        norm = self.k1 * (1 - self.b + self.b * self.doc_len[weights.row] / self.avgdl)
        data = self.idf[weights.col] * weights.data * (self.k1 + 1) / (weights.data + norm)
        self.weights = sparse.csr_matrix((data, (weights.row, weights.col)), shape=self.tf.shape)

    def _query_vector(self, query: str) -> np.ndarray:
        vec = np.zeros(len(self.vocab))
        for term in tokenize(query):
            j = self.vocab.get(term)
            if j is not None:
                vec[j] += 1.0
        return vec

    def score_text(self, query: str, passage: str) -> float:
        """BM25 of one (query, passage) pair."""
        i = self._text_index.get(passage)
        if i is not None:
            return float((self.weights[i] @ self._query_vector(query))[0])
        counts = Counter(tokenize(passage))
        length = sum(counts.values())
        total = 0.0
        for term in tokenize(query):
            j = self.vocab.get(term)
            tf = counts.get(term, 0)
            if j is None or tf == 0:
                continue
            total += self.idf[j] * tf * (self.k1 + 1) / (tf + self.k1 * (1 - self.b + self.b * length / self.avgdl))
        return total

    def __call__(self, queries: Sequence[str], passages: Sequence[str]) -> np.ndarray:
        """Scores of aligned pairs ``(queries[i], passages[i])`` (the teacher interface of ``teacher_scores``)."""
        if len(queries) != len(passages):
            raise ValueError(f"got {len(queries)} queries but {len(passages)} passages")
        return np.array([self.score_text(q, p) for q, p in zip(queries, passages)], dtype=np.float64)

    def scores(self, query: str) -> np.ndarray:
        """BM25 of ``query`` against every corpus document, in ``doc_ids`` order."""
        return np.asarray(self.weights @ self._query_vector(query)).ravel()

    def corpus_scores(self) -> np.ndarray:
        """Dense ``[n, n]`` BM25, row = corpus document as a query of its distinct terms, column = scored document."""
        query_terms = (self.tf > 0).astype(np.float64)
        return np.asarray((query_terms @ self.weights.T).todense())

    def top_k(self, query: str, k: int, exclude: set[str] | None = None) -> list[tuple[str, float]]:
        """The ``k`` best (doc_id, score) pairs, best first, skipping ids in ``exclude`` (ties: corpus order)."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k!r}")
        s = self.scores(query)
        order = np.argsort(-s, kind="stable")
        out = []
        for i in order:
            did = self.doc_ids[i]
            if exclude and did in exclude:
                continue
            out.append((did, float(s[i])))
            if len(out) == k:
                break
        return out


def bm25_scores(docs: Sequence[str], k1: float = 0.9, b: float = 0.4) -> np.ndarray:
    """Dense ``[n, n]`` float32 BM25, row = query document (its distinct terms), column = scored document.

    :meth:`BM25Scorer.corpus_scores` over ``docs``; query terms are taken once each (a document used as a query is
    a bag of distinct terms). Meant for a few thousand documents (the result is dense).
    """
    if len(docs) == 0:
        raise ValueError("bm25_scores needs at least one document")
    return BM25Scorer({str(i): d for i, d in enumerate(docs)}, k1=k1, b=b).corpus_scores().astype(np.float32)
