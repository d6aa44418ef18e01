"""LlamaIndex: a ``BaseEmbedding`` that routes roles and checks the vector store's metric.

LlamaIndex calls ``_get_query_embedding`` for queries and ``_get_text_embedding(s)`` for nodes, which map onto
``encode_query`` / ``encode_document``. Its default ``SimpleVectorStore`` scores with cosine only, so
``metric="cosine"`` is checked by default: a model that keeps document magnitude must be exported with
``--store cosine`` first (or pass the metric of the vector store you use). The embedding cannot see which store it
feeds: a metric other than cosine, for a model that does not rank as trained under cosine, warns
(:class:`~st_magnitude.serving.metric.StoreMetricWarning`) that LlamaIndex's default store would rank differently.
"""

from __future__ import annotations

import warnings
from typing import Any

from st_magnitude.model.stores import preserved_metrics
from st_magnitude.serving._encode import encode_documents, encode_queries
from st_magnitude.serving._stacks import STACK_REGISTRY
from st_magnitude.serving.metric import StoreMetricWarning, import_stack, store_metric

_STACK = STACK_REGISTRY["llamaindex"]
_base = import_stack("llama_index.core.embeddings", _STACK.package)

__all__ = ["MagnitudeLlamaIndexEmbedding"]


class MagnitudeLlamaIndexEmbedding(_base.BaseEmbedding):
    """Queries through ``model.encode_query``, nodes through ``model.encode_document``.

    Args:
        model: a loaded SentenceTransformer (converted by st-magnitude).
        metric: the metric of the vector store the embeddings go to (``cosine`` for ``SimpleVectorStore``);
            refused with a ValueError when the model does not rank as trained under it, and a
            :class:`~st_magnitude.serving.metric.StoreMetricWarning` when it is not cosine and the model does not
            rank as trained under cosine (LlamaIndex's default store would lose the ranking).
    """

    def __init__(self, model: Any, metric: str = "cosine", batch_size: int = 32, **kwargs: Any) -> None:
        checked = store_metric(model, metric, "a LlamaIndex vector store")
        if checked != "cosine" and "cosine" not in preserved_metrics(model):
            warnings.warn(
                f"MagnitudeLlamaIndexEmbedding(metric={metric!r}) ranks as trained only in a vector store that "
                f"scores with {checked}; LlamaIndex's default SimpleVectorStore (a VectorStoreIndex without "
                "vector_store / storage_context) scores with cosine, where this model's top-k differs. For the "
                "default store, export the model with --store cosine (st-magnitude convert MODEL VARIANT --store "
                "cosine --norm-texts CORPUS -o OUT) and keep metric='cosine'; with a store configured for "
                f"{checked}, silence this with warnings.filterwarnings('ignore', "
                "category=st_magnitude.serving.metric.StoreMetricWarning)",
                StoreMetricWarning,
                stacklevel=2,
            )
        super().__init__(model_name="st-magnitude", embed_batch_size=batch_size, **kwargs)
        self._model = model
        self._metric = checked

    @classmethod
    def class_name(cls) -> str:
        return "MagnitudeLlamaIndexEmbedding"

    def _get_query_embedding(self, query: str) -> list[float]:
        return encode_queries(self._model, [query], self.embed_batch_size)[0].tolist()

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return encode_documents(self._model, [text], self.embed_batch_size)[0].tolist()

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return encode_documents(self._model, texts, self.embed_batch_size).tolist()


def index_and_search(model: Any, queries: list[str], documents: list[str], k: int, metric: str | None) -> list:
    """The agreement check's path (:func:`st_magnitude.serving.agreement.stack_ranking`): a ``VectorStoreIndex`` on
    the default ``SimpleVectorStore`` with this embedding, and its retriever."""
    from llama_index.core import VectorStoreIndex
    from llama_index.core.schema import TextNode

    if metric not in (None, "cosine"):
        raise ValueError("LlamaIndex's default SimpleVectorStore scores with cosine only")
    emb = MagnitudeLlamaIndexEmbedding(model)
    nodes = [TextNode(text=t, id_=str(i)) for i, t in enumerate(documents)]
    retriever = VectorStoreIndex(nodes, embed_model=emb).as_retriever(similarity_top_k=k)
    return [[int(n.node.node_id) for n in retriever.retrieve(q)] for q in queries]
