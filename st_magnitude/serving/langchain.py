"""LangChain: an ``Embeddings`` that routes roles, and an in-memory vector store that keeps the ranking.

LangChain calls ``embed_documents`` when indexing and ``embed_query`` when searching, which map one-to-one onto
``encode_document`` / ``encode_query``. ``InMemoryVectorStore`` scores with cosine only, so a model that keeps
document magnitude (dot, qnorm, learnable) must be exported with ``--store cosine`` first;
:func:`langchain_vector_store` refuses one that is not.
"""

from __future__ import annotations

from typing import Any

from st_magnitude.serving._encode import encode_documents, encode_queries
from st_magnitude.serving._stacks import STACK_REGISTRY
from st_magnitude.serving.metric import import_stack, store_metric

_STACK = STACK_REGISTRY["langchain"]
_core = import_stack("langchain_core.embeddings", _STACK.package)

__all__ = ["MagnitudeLangChainEmbeddings", "langchain_vector_store"]


class MagnitudeLangChainEmbeddings(_core.Embeddings):
    """``embed_documents`` → ``model.encode_document``, ``embed_query`` → ``model.encode_query``."""

    def __init__(self, model: Any, batch_size: int = 32) -> None:
        self.model = model
        self.batch_size = batch_size

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return encode_documents(self.model, texts, self.batch_size).tolist()

    def embed_query(self, text: str) -> list[float]:
        return encode_queries(self.model, [text], self.batch_size)[0].tolist()


def langchain_vector_store(model: Any, batch_size: int = 32) -> Any:
    """A ``langchain_core`` ``InMemoryVectorStore`` over the model (cosine: refused unless the model ranks as
    trained under cosine, i.e. dnorm / cosine, or exported with ``--store cosine``)."""
    store_metric(model, "cosine", "LangChain InMemoryVectorStore (cosine only)")
    vectorstores = import_stack("langchain_core.vectorstores", _STACK.package)
    return vectorstores.InMemoryVectorStore(embedding=MagnitudeLangChainEmbeddings(model, batch_size))


def index_and_search(model: Any, queries: list[str], documents: list[str], k: int, metric: str | None) -> list:
    """The agreement check's path (:func:`st_magnitude.serving.agreement.stack_ranking`): ``add_texts`` into a
    :func:`langchain_vector_store`, then ``similarity_search``."""
    if metric not in (None, "cosine"):
        raise ValueError("LangChain's InMemoryVectorStore scores with cosine only")
    store = langchain_vector_store(model)
    store.add_texts(documents, ids=[str(i) for i in range(len(documents))])
    return [[int(doc.id) for doc in store.similarity_search(q, k=k)] for q in queries]
