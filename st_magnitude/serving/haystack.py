"""Haystack: query and document embedder components, and a document store with a ranking-preserving metric.

A Haystack pipeline embeds documents with a document embedder and queries with a text embedder: the two
components here call ``encode_document`` and ``encode_query``. :func:`haystack_document_store` builds an
``InMemoryDocumentStore`` whose ``embedding_similarity_function`` keeps the model's ranking (``dot_product`` by
default; ``cosine`` only for a model that ranks as trained under cosine).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from st_magnitude.serving._encode import encode_documents, encode_queries
from st_magnitude.serving._stacks import STACK_REGISTRY
from st_magnitude.serving.metric import best_metric, import_stack, store_metric

_STACK = STACK_REGISTRY["haystack"]
_hs = import_stack("haystack", _STACK.package)

__all__ = ["MagnitudeHaystackDocumentEmbedder", "MagnitudeHaystackTextEmbedder", "haystack_document_store"]

#: InMemoryDocumentStore's similarity functions, by stack-neutral metric
_NAMES = _STACK.metrics


@_hs.component
class MagnitudeHaystackTextEmbedder:
    """Embeds a query string with ``model.encode_query``."""

    def __init__(self, model: Any) -> None:
        self.model = model

    @_hs.component.output_types(embedding=list[float])
    def run(self, text: str) -> dict[str, Any]:
        return {"embedding": encode_queries(self.model, [text])[0].tolist()}


@_hs.component
class MagnitudeHaystackDocumentEmbedder:
    """Embeds ``Document.content`` with ``model.encode_document`` (the documents are returned with embeddings)."""

    def __init__(self, model: Any, batch_size: int = 32) -> None:
        self.model = model
        self.batch_size = batch_size

    @_hs.component.output_types(documents=list[_hs.Document])
    def run(self, documents: list[_hs.Document]) -> dict[str, Any]:
        texts = [d.content or "" for d in documents]
        vectors = encode_documents(self.model, texts, self.batch_size, ids=[d.id for d in documents])
        return {"documents": [replace(doc, embedding=vec.tolist()) for doc, vec in zip(documents, vectors)]}


def haystack_document_store(model: Any, similarity: str | None = None) -> Any:
    """An ``InMemoryDocumentStore`` scoring with ``similarity`` (``dot_product`` / ``cosine``; default: the first of
    dot, cosine that keeps the model's ranking); a similarity that does not is refused."""
    metric = best_metric(model, prefer=tuple(_NAMES)) if similarity is None else similarity
    canonical = store_metric(model, metric, "Haystack InMemoryDocumentStore")
    if canonical not in _NAMES:
        raise ValueError(f"InMemoryDocumentStore scores with {sorted(_NAMES.values())}, not {metric!r}")
    in_memory = import_stack("haystack.document_stores.in_memory", _STACK.package)
    return in_memory.InMemoryDocumentStore(embedding_similarity_function=_NAMES[canonical])


def index_and_search(model: Any, queries: list[str], documents: list[str], k: int, metric: str | None) -> list:
    """The agreement check's path (:func:`st_magnitude.serving.agreement.stack_ranking`): the document embedder into
    a :func:`haystack_document_store`, an ``InMemoryEmbeddingRetriever`` fed by the text embedder."""
    from haystack.components.retrievers.in_memory import InMemoryEmbeddingRetriever

    store = haystack_document_store(model, metric)
    docs = [_hs.Document(id=str(i), content=t) for i, t in enumerate(documents)]
    store.write_documents(MagnitudeHaystackDocumentEmbedder(model).run(docs)["documents"])
    retriever = InMemoryEmbeddingRetriever(store, top_k=k)
    embedder = MagnitudeHaystackTextEmbedder(model)
    out = []
    for q in queries:
        found = retriever.run(query_embedding=embedder.run(q)["embedding"])["documents"]
        out.append([int(d.id) for d in found])
    return out
