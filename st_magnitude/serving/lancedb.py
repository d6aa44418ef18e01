"""LanceDB: a registered embedding function that routes roles, and a search with a ranking-preserving distance.

LanceDB computes source-column vectors with ``compute_source_embeddings`` and query vectors with
``compute_query_embeddings``: here ``encode_document`` and ``encode_query``. The function is registered as
``"st-magnitude"`` in LanceDB's embedding registry when this module is imported. Its default distance (``l2``)
loses a magnitude-keeping model's ranking: :func:`lancedb_search` searches with the distance that keeps it (``dot``
by default) and refuses one that does not.
"""

from __future__ import annotations

from typing import Any

from st_magnitude.serving._encode import encode_documents, encode_queries
from st_magnitude.serving.metric import best_metric, import_stack, store_metric

_emb = import_stack("lancedb.embeddings", "lancedb")

__all__ = ["lancedb_embedding_function", "lancedb_search"]

#: loaded models by path, shared by the registered function's instances (LanceDB re-creates them from their config)
_MODELS: dict[str, Any] = {}


@_emb.register("st-magnitude")
class MagnitudeLanceEmbeddings(_emb.TextEmbeddingFunction):
    """``name``: the model folder (loaded with :func:`st_magnitude.integrations.load_model`, which loads this
    package's own modules without ``trust_remote_code``); ``trust_remote_code``: for any other custom code."""

    name: str
    trust_remote_code: bool = False

    def _model(self) -> Any:
        if self.name not in _MODELS:
            from st_magnitude.integrations.models import load_model

            _MODELS[self.name] = load_model(self.name, trust_remote_code=self.trust_remote_code)
        return _MODELS[self.name]

    def ndims(self) -> int:
        return int(self._model().get_embedding_dimension())

    def compute_query_embeddings(self, query: str, *args: Any, **kwargs: Any) -> list:
        return [encode_queries(self._model(), [query])[0]]

    def compute_source_embeddings(self, texts: Any, *args: Any, **kwargs: Any) -> list:
        return list(encode_documents(self._model(), self.sanitize_input(texts)))

    def generate_embeddings(self, texts: Any, *args: Any, **kwargs: Any) -> list:
        return self.compute_source_embeddings(texts)


def lancedb_embedding_function(model: Any, trust_remote_code: bool = False) -> Any:
    """The registered ``"st-magnitude"`` function for ``model``: a model folder (loaded on first use, with
    ``trust_remote_code``) or a loaded SentenceTransformer (kept for this process only)."""
    if isinstance(model, str):
        name = model
    else:
        name = f"loaded-model-{id(model)}"
        _MODELS[name] = model
    return _emb.get_registry().get("st-magnitude").create(name=name, trust_remote_code=trust_remote_code)


def lancedb_search(table: Any, query: str, model: Any, k: int = 10, distance: str | None = None) -> Any:
    """``table.search(query)`` with the distance that keeps ``model``'s ranking (``dot``, ``cosine`` or ``l2``;
    default the first of them that does) and a limit of ``k``; returns the LanceDB query builder."""
    metric = best_metric(model) if distance is None else distance
    canonical = store_metric(model, metric, "LanceDB")
    return table.search(query).distance_type(canonical).limit(k)
