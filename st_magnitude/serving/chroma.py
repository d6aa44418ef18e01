"""Chroma: an embedding function that routes roles, and a collection with a ranking-preserving space.

Chroma embeds added documents with ``__call__`` and query texts with ``embed_query``: here ``encode_document`` and
``encode_query``. :func:`chroma_collection` creates the collection in the space that keeps the model's ranking
(``ip`` by default; ``cosine`` / ``l2`` only for a model that ranks as trained under them) and with HNSW search
parameters (``ef_search``) large enough that the approximate search returns the exact top-k on small collections.
"""

from __future__ import annotations

import uuid
from typing import Any

from st_magnitude.serving._encode import encode_documents, encode_queries
from st_magnitude.serving._stacks import STACK_REGISTRY
from st_magnitude.serving.metric import best_metric, import_stack, store_metric

_STACK = STACK_REGISTRY["chroma"]
_types = import_stack("chromadb.api.types", _STACK.package)

__all__ = ["MagnitudeChromaEmbeddingFunction", "chroma_collection"]


class MagnitudeChromaEmbeddingFunction(_types.EmbeddingFunction):
    """Documents through ``model.encode_document``, queries through ``model.encode_query``."""

    def __init__(self, model: Any, batch_size: int = 32) -> None:
        self.model = model
        self.batch_size = batch_size

    def _loaded(self) -> Any:
        if self.model is None:
            raise ValueError(
                "this collection's st-magnitude embedding function was rebuilt from its saved config, which holds no "
                "model: pass embedding_function=MagnitudeChromaEmbeddingFunction(model) to get_collection"
            )
        return self.model

    def __call__(self, input: Any) -> Any:
        return list(encode_documents(self._loaded(), list(input), self.batch_size))

    def embed_query(self, input: Any) -> Any:
        return list(encode_queries(self._loaded(), list(input), self.batch_size))

    @staticmethod
    def name() -> str:
        return "st-magnitude"

    def get_config(self) -> dict[str, Any]:
        return {"batch_size": self.batch_size}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> MagnitudeChromaEmbeddingFunction:
        """A placeholder without a model (Chroma persists the config, not the model): it raises when called."""
        return MagnitudeChromaEmbeddingFunction(None, config.get("batch_size", 32))

    def default_space(self) -> str:
        return _STACK.metrics["dot"]

    def supported_spaces(self) -> list[str]:
        return list(_STACK.metrics.values())


def chroma_collection(
    client: Any, name: str, model: Any, space: str | None = None, ef_search: int = 1000, batch_size: int = 32
) -> Any:
    """``client.create_collection`` with the role-routing embedding function and a space that keeps the ranking.

    ``space``: ``ip`` / ``cosine`` / ``l2`` (default: the first of ip, cosine, l2 that keeps it); one that does not
    is refused. ``ef_search`` (HNSW's candidate list) at least the collection size makes the search exhaustive.
    """
    metric = best_metric(model, prefer=tuple(_STACK.metrics)) if space is None else space
    canonical = store_metric(model, metric, _STACK.title)
    hnsw = {"space": _STACK.metrics[canonical], "ef_search": ef_search, "ef_construction": ef_search}
    return client.create_collection(
        name, embedding_function=MagnitudeChromaEmbeddingFunction(model, batch_size), configuration={"hnsw": hnsw}
    )


def index_and_search(model: Any, queries: list[str], documents: list[str], k: int, metric: str | None) -> list:
    """The agreement check's path (:func:`st_magnitude.serving.agreement.stack_ranking`): an ephemeral client, a
    :func:`chroma_collection`, ``add`` the documents, ``query`` with the texts."""
    import chromadb
    from chromadb.config import Settings

    client = chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False))
    col = chroma_collection(client, f"c{uuid.uuid4().hex[:12]}", model, metric)
    col.add(ids=[str(i) for i in range(len(documents))], documents=documents)
    res = col.query(query_texts=queries, n_results=k)
    client.delete_collection(col.name)
    return [[int(i) for i in row] for row in res["ids"]]
