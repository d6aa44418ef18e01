"""LangChain: an ``Embeddings`` that routes roles, and an in-memory vector store that keeps the ranking.

LangChain calls ``embed_documents`` when indexing and ``embed_query`` when searching, which map one-to-one onto
``encode_document`` / ``encode_query``. ``InMemoryVectorStore`` scores with cosine only, so a model that keeps
document magnitude (dot, qnorm, learnable) must be exported with ``--store cosine`` first;
:func:`langchain_vector_store` refuses one that is not.
"""

from __future__ import annotations

from typing import Any

from st_magnitude.serving._encode import encode_documents, encode_queries
from st_magnitude.serving.metric import import_stack, store_metric

_core = import_stack("langchain_core.embeddings", "langchain-core")

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
    vectorstores = import_stack("langchain_core.vectorstores", "langchain-core")
    return vectorstores.InMemoryVectorStore(embedding=MagnitudeLangChainEmbeddings(model, batch_size))
