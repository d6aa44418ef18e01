"""Chroma: an embedding function that routes roles, and a collection with a ranking-preserving space.

Chroma embeds added documents with ``__call__`` and query texts with ``embed_query``: here ``encode_document`` and
``encode_query``. :func:`chroma_collection` creates the collection in the space that keeps the model's ranking
(``ip`` by default; ``cosine`` / ``l2`` only for a model that ranks as trained under them). Chroma's HNSW index is
approximate: under ``ip`` (not a metric) a document can be left out of the graph's reach even when ``ef_search`` is
larger than the collection, so ``chroma_collection`` takes ``max_neighbors`` too; the agreement check's
:func:`index_and_search` makes its graph complete, so it measures the space, not HNSW's recall.
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


#: the most links per document ``chroma_collection`` asks of HNSW (each document holds room for that many); at least
#: the collection size makes the search exhaustive
MAX_NEIGHBORS = 10_000


def chroma_collection(
    client: Any,
    name: str,
    model: Any,
    space: str | None = None,
    ef_search: int = 1000,
    max_neighbors: int = 16,
    batch_size: int = 32,
) -> Any:
    """``client.create_collection`` with the role-routing embedding function and a space that keeps the ranking.

    ``space``: ``ip`` / ``cosine`` / ``l2`` (default: the first of ip, cosine, l2 that keeps it); one that does not
    is refused. ``ef_search`` (HNSW's candidate list, also used while building) and ``max_neighbors`` (links per
    document; Chroma's default 16) set the recall of the approximate search. ``ef_search`` at least the collection
    size visits every document the graph reaches; under ``ip`` a document can still be unreachable (now and then in a
    60-document toy collection with 16 links). ``max_neighbors`` at least the collection size links every pair, and
    the search is exhaustive.
    """
    for key, value, most in (("ef_search", ef_search, None), ("max_neighbors", max_neighbors, MAX_NEIGHBORS)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"chroma_collection: {key} must be a positive integer, got {value!r}")
        if most is not None and value > most:
            raise ValueError(
                f"chroma_collection: {key} must be an integer in [1, {most}] (links per document), got {value!r}"
            )
    metric = best_metric(model, prefer=tuple(_STACK.metrics)) if space is None else space
    canonical = store_metric(model, metric, _STACK.title)
    hnsw = {
        "space": _STACK.metrics[canonical],
        "ef_search": ef_search,
        "ef_construction": ef_search,
        "max_neighbors": max_neighbors,
    }
    return client.create_collection(
        name, embedding_function=MagnitudeChromaEmbeddingFunction(model, batch_size), configuration={"hnsw": hnsw}
    )


def index_and_search(model: Any, queries: list[str], documents: list[str], k: int, metric: str | None) -> list:
    """The agreement check's path (:func:`st_magnitude.serving.agreement.stack_ranking`): an ephemeral client, a
    :func:`chroma_collection` whose HNSW graph links every pair of documents (``max_neighbors`` and ``ef_search`` at
    least the collection size: an exhaustive search, so the check measures the space, not HNSW's recall), ``add``
    the documents, ``query`` with the texts."""
    import chromadb
    from chromadb.config import Settings

    client = chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False))
    size = max(len(documents), 16)
    col = chroma_collection(
        client,
        f"c{uuid.uuid4().hex[:12]}",
        model,
        metric,
        ef_search=max(size, 1000),
        max_neighbors=min(size, MAX_NEIGHBORS),
    )
    col.add(ids=[str(i) for i in range(len(documents))], documents=documents)
    res = col.query(query_texts=queries, n_results=k)
    client.delete_collection(col.name)
    return [[int(i) for i in row] for row in res["ids"]]
