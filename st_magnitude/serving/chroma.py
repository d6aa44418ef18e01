"""Chroma: an embedding function that routes roles, and a collection with a ranking-preserving space.

Chroma embeds added documents with ``__call__`` and query texts with ``embed_query``: here ``encode_document`` and
``encode_query``. :func:`chroma_collection` creates the collection in the space that keeps the model's ranking
(``ip`` by default; ``cosine`` / ``l2`` only for a model that ranks as trained under them) and with HNSW search
parameters (``ef_search``) large enough that the approximate search returns the exact top-k on small collections.
"""

from __future__ import annotations

from typing import Any

from st_magnitude.serving._encode import encode_documents, encode_queries
from st_magnitude.serving.metric import best_metric, import_stack, store_metric

_types = import_stack("chromadb.api.types", "chromadb")

__all__ = ["MagnitudeChromaEmbeddingFunction", "chroma_collection"]

_SPACES = {"dot": "ip", "cosine": "cosine", "l2": "l2"}


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
        return "ip"

    def supported_spaces(self) -> list[str]:
        return ["ip", "cosine", "l2"]


def chroma_collection(
    client: Any, name: str, model: Any, space: str | None = None, ef_search: int = 1000, batch_size: int = 32
) -> Any:
    """``client.create_collection`` with the role-routing embedding function and a space that keeps the ranking.

    ``space``: ``ip`` / ``cosine`` / ``l2`` (default: the first of ip, cosine, l2 that keeps it); one that does not
    is refused. ``ef_search`` (HNSW's candidate list) at least the collection size makes the search exhaustive.
    """
    metric = best_metric(model) if space is None else space
    canonical = store_metric(model, metric, "Chroma")
    return client.create_collection(
        name,
        embedding_function=MagnitudeChromaEmbeddingFunction(model, batch_size),
        configuration={"hnsw": {"space": _SPACES[canonical], "ef_search": ef_search, "ef_construction": ef_search}},
    )
