"""BEIR integration: a role-keeping model adapter, and BEIR evaluation with the model's own similarity.

BEIR's ``models.SentenceBERT`` encodes both sides with ``model.encode`` and so loses ST's task routing
(a query-normalising route then gives query norms ≠ 1). :class:`STQueryDocAdapter` calls ``encode_query`` /
``encode_document`` instead, and :func:`beir_search` plugs it into BEIR's own ``DenseRetrievalExactSearch`` with the
model's ``similarity`` registered as a score function, so BEIR's ``EvaluateRetrieval`` scores exactly what the model
was trained with.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch

from st_magnitude.data.beir import BEIRData
from st_magnitude.evaluation.ir import doc_texts, resolve_score_fn, retrieval_metrics

logger = logging.getLogger(__name__)

__all__ = ["PrecomputedAdapter", "STQueryDocAdapter", "beir_evaluate", "beir_search", "make_beir_retriever"]

MODEL_SCORE = "model"


def _corpus_texts(corpus: Any, sep: str) -> list[str]:
    """BEIR passes the corpus as a list of dicts (or a dict of lists); build mteb-style texts."""
    if isinstance(corpus, dict):  # {"title": [...], "text": [...]}
        titles = corpus.get("title") or [""] * len(corpus["text"])
        items = [{"title": t, "text": x} for t, x in zip(titles, corpus["text"])]
    else:
        items = list(corpus)
    return doc_texts(dict(enumerate(items)), list(range(len(items))), sep=sep)


class STQueryDocAdapter:
    """BEIR model interface (``encode_queries`` / ``encode_corpus``) over a SentenceTransformer that keeps roles.

    Queries go through ``model.encode_query`` and documents through ``model.encode_document``; a document is
    ``(title + sep + text).strip()`` (as in mteb).
    """

    def __init__(self, model, sep: str = " ") -> None:
        self.model = model
        self.sep = sep

    def encode_queries(self, queries: Sequence[str], batch_size: int = 32, **kwargs) -> torch.Tensor:
        return self.model.encode_query(list(queries), batch_size=batch_size, **kwargs)

    def encode_corpus(self, corpus: Any, batch_size: int = 32, **kwargs) -> torch.Tensor:
        return self.model.encode_document(_corpus_texts(corpus, self.sep), batch_size=batch_size, **kwargs)


class PrecomputedAdapter:
    """BEIR model interface that returns precomputed embeddings looked up by text (for benchmarks and tests)."""

    def __init__(self, query_emb: dict[str, torch.Tensor], doc_emb: dict[str, torch.Tensor], sep: str = " ") -> None:
        self.query_emb, self.doc_emb, self.sep = query_emb, doc_emb, sep

    def encode_queries(self, queries: Sequence[str], **kwargs) -> torch.Tensor:
        return torch.stack([self.query_emb[q] for q in queries])

    def encode_corpus(self, corpus: Any, **kwargs) -> torch.Tensor:
        return torch.stack([self.doc_emb[t] for t in _corpus_texts(corpus, self.sep)])


def make_beir_retriever(model_or_adapter, similarity=None, batch_size: int = 32, show_progress_bar: bool = False):
    """BEIR ``DenseRetrievalExactSearch`` over an adapter, with the model's similarity registered as ``"model"``.

    Returns ``(retriever, score_function_name)`` for ``EvaluateRetrieval(retriever, score_function=...)``.
    """
    from beir.retrieval.search.dense import DenseRetrievalExactSearch

    adapter = model_or_adapter
    if not hasattr(adapter, "encode_queries"):
        adapter = STQueryDocAdapter(model_or_adapter)
    model = getattr(adapter, "model", None)
    retriever = DenseRetrievalExactSearch(adapter, batch_size=batch_size, show_progress_bar=show_progress_bar)
    if model is None and similarity is None:
        return retriever, "dot"
    score_fn, desc = resolve_score_fn(model, similarity)
    retriever.score_functions[MODEL_SCORE] = lambda q, d: score_fn(q, d).float()
    retriever.score_function_desc[MODEL_SCORE] = desc
    return retriever, MODEL_SCORE


def beir_search(
    model_or_adapter, data: BEIRData, top_k: int = 100, similarity=None, batch_size: int = 32
) -> dict[str, dict[str, float]]:
    """Retrieve with BEIR's ``EvaluateRetrieval.retrieve`` (``DenseRetrievalExactSearch``) and our adapter."""
    from beir.retrieval.evaluation import EvaluateRetrieval

    retriever, sf = make_beir_retriever(model_or_adapter, similarity, batch_size=batch_size)
    er = EvaluateRetrieval(retriever, k_values=[top_k], score_function=sf)
    return er.retrieve(data.corpus, data.queries)


def beir_evaluate(
    model_or_adapter,
    data: BEIRData,
    *,
    similarity=None,
    ndcg_at_k: Sequence[int] = (10,),
    recall_at_k: Sequence[int] = (100,),
    mrr_at_k: Sequence[int] = (10,),
    batch_size: int = 32,
) -> dict[str, float]:
    """The whole BEIR path: BEIR exact search + BEIR ``EvaluateRetrieval`` metrics (pytrec_eval)."""
    top_k = max([*ndcg_at_k, *recall_at_k, *mrr_at_k])
    results = beir_search(model_or_adapter, data, top_k=top_k, similarity=similarity, batch_size=batch_size)
    return retrieval_metrics(data.qrels, results, ndcg_at_k=ndcg_at_k, recall_at_k=recall_at_k, mrr_at_k=mrr_at_k)
