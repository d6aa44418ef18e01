"""Qdrant: the collection's vector parameters with a ranking-preserving distance.

Qdrant stores the vectors the caller uploads: encode documents with ``encode_document`` and queries with
``encode_query`` (or :mod:`st_magnitude.serving._encode`), and create the collection with
:func:`qdrant_vector_params` — ``Distance.DOT`` by default; ``COSINE`` / ``EUCLID`` only for a model that ranks as
trained under them (dnorm, or exported with ``--store cosine`` / ``--store l2``).
"""

from __future__ import annotations

from typing import Any

from st_magnitude.serving._encode import encode_documents, encode_queries
from st_magnitude.serving._stacks import STACK_REGISTRY
from st_magnitude.serving.metric import best_metric, import_stack, store_metric

__all__ = ["qdrant_vector_params"]

_STACK = STACK_REGISTRY["qdrant"]


def qdrant_vector_params(model: Any, distance: str | None = None) -> Any:
    """``qdrant_client.models.VectorParams(size=model dimension, distance=...)``; ``distance`` is ``"dot"``,
    ``"cosine"``, ``"euclid"``/``"l2"`` or a ``Distance``; one that does not keep the model's ranking is refused."""
    models = import_stack("qdrant_client.models", _STACK.package)
    if distance is None:
        metric = best_metric(model, prefer=tuple(_STACK.metrics))
    else:
        metric = str(getattr(distance, "value", distance)).lower()
    canonical = store_metric(model, metric, _STACK.title)
    return models.VectorParams(
        size=model.get_embedding_dimension(), distance=getattr(models.Distance, _STACK.metrics[canonical])
    )


def index_and_search(model: Any, queries: list[str], documents: list[str], k: int, metric: str | None) -> list:
    """The agreement check's path (:func:`st_magnitude.serving.agreement.stack_ranking`): an in-memory client, a
    collection with :func:`qdrant_vector_params`, ``encode_document`` vectors upserted, ``encode_query`` vectors
    searched."""
    from qdrant_client import QdrantClient

    models = import_stack("qdrant_client.models", _STACK.package)
    client = QdrantClient(":memory:")
    client.create_collection("docs", vectors_config=qdrant_vector_params(model, metric))
    vectors = encode_documents(model, documents)
    client.upsert("docs", points=[models.PointStruct(id=i, vector=v.tolist()) for i, v in enumerate(vectors)])
    out = [
        [int(p.id) for p in client.query_points("docs", query=q.tolist(), limit=k).points]
        for q in encode_queries(model, queries)
    ]
    client.close()
    return out
