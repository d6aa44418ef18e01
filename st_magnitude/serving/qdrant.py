"""Qdrant: the collection's vector parameters with a ranking-preserving distance.

Qdrant stores the vectors the caller uploads: encode documents with ``encode_document`` and queries with
``encode_query`` (or :mod:`st_magnitude.serving._encode`), and create the collection with
:func:`qdrant_vector_params` — ``Distance.DOT`` by default; ``COSINE`` / ``EUCLID`` only for a model that ranks as
trained under them (dnorm, or exported with ``--store cosine`` / ``--store l2``).
"""

from __future__ import annotations

from typing import Any

from st_magnitude.serving.metric import best_metric, import_stack, store_metric

__all__ = ["qdrant_vector_params"]

_NAMES = {"dot": "DOT", "cosine": "COSINE", "l2": "EUCLID"}


def qdrant_vector_params(model: Any, distance: str | None = None) -> Any:
    """``qdrant_client.models.VectorParams(size=model dimension, distance=...)``; ``distance`` is ``"dot"``,
    ``"cosine"``, ``"euclid"``/``"l2"`` or a ``Distance``; one that does not keep the model's ranking is refused."""
    models = import_stack("qdrant_client.models", "qdrant-client")
    if distance is None:
        metric = best_metric(model)
    else:
        name = getattr(distance, "value", distance)
        metric = {"euclid": "l2", "manhattan": "manhattan"}.get(str(name).lower(), str(name).lower())
    canonical = store_metric(model, metric, "Qdrant")
    return models.VectorParams(
        size=model.get_embedding_dimension(), distance=getattr(models.Distance, _NAMES[canonical])
    )
