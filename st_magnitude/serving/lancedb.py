"""LanceDB: a registered embedding function that routes roles, and a search with a ranking-preserving distance.

LanceDB computes source-column vectors with ``compute_source_embeddings`` and query vectors with
``compute_query_embeddings``: here ``encode_document`` and ``encode_query``. The function is registered as
``"st-magnitude"`` in LanceDB's embedding registry when this module is imported.

What a table saves, and what it does not: LanceDB writes the function's config into the table's schema and rebuilds
the function from it whenever anyone opens the table. A table may come from someone else, so that config is never
trusted with a model: it holds only the *name* the model was registered under, and the function looks that name up
among the models registered in code in this process (:func:`lancedb_embedding_function`). No model is loaded, no
``trust_remote_code`` is taken and no retry count is read from a table; a table whose model is not registered is
refused with an error saying how to register it.

Distances: LanceDB's default (``l2``) loses a magnitude-keeping model's ranking, and LanceDB computes the query vector
of ``table.search(text)`` before ``.distance_type(...)`` is known. So a plain ``table.search(text)`` is refused for a
model that does not rank as trained under ``l2`` (it is exact for one that does: dnorm, or a ``--store`` export);
:func:`lancedb_search` encodes the query itself and searches with the distance that keeps the ranking.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from st_magnitude.model.stores import preserved_metrics
from st_magnitude.serving._encode import encode_documents, encode_queries
from st_magnitude.serving._stacks import STACK_REGISTRY
from st_magnitude.serving.metric import best_metric, import_stack, store_metric

_STACK = STACK_REGISTRY["lancedb"]
_emb = import_stack("lancedb.embeddings", _STACK.package)
_pydantic = import_stack("pydantic", _STACK.package)

__all__ = ["LanceDBRefusal", "MagnitudeLanceEmbeddings", "lancedb_embedding_function", "lancedb_search"]

#: the models registered in code in this process, by the name a table's saved config holds
_MODELS: dict[str, Any] = {}


class LanceDBRefusal(ValueError):
    """A refusal of the ``st-magnitude`` function inside LanceDB (an unregistered model, a distance that loses the
    ranking, a non-finite vector).

    LanceDB retries every failure of an embedding function with exponential backoff (minutes), except errors that
    carry HTTP status 401 / 403; a refusal is permanent, so it carries 403 and LanceDB raises it at once.
    """

    status_code = 403


@_emb.register("st-magnitude")
class MagnitudeLanceEmbeddings(_emb.TextEmbeddingFunction):
    """``name``: the name a model was registered under with :func:`lancedb_embedding_function` in this process.

    A table's saved config is reduced to that name when LanceDB rebuilds the function from it (:meth:`create`):
    anything else it holds (``trust_remote_code``, ``max_retries``, ...) is dropped, and LanceDB does not retry.
    """

    name: str
    max_retries: int = 0
    _asked_for_code: bool = _pydantic.PrivateAttr(default=False)

    @classmethod
    def create(cls, **kwargs: Any) -> MagnitudeLanceEmbeddings:
        name = kwargs.get("name")
        if not isinstance(name, str):
            raise LanceDBRefusal(
                f"the table's saved metadata names the st-magnitude model {name!r}, not a string: register the model "
                "in code with st_magnitude.serving.lancedb.lancedb_embedding_function(MODEL, name=NAME)"
            )
        instance = super().create(name=name)
        instance._asked_for_code = bool(kwargs.get("trust_remote_code"))
        return instance

    def _model(self) -> Any:
        model = _MODELS.get(self.name)
        if model is None:
            asked = self._asked_for_code
            raise LanceDBRefusal(
                f"the LanceDB table's saved metadata names the st-magnitude model {self.name!r}, which is not "
                "registered in this process. st-magnitude never loads a model, or runs a model's code, because a "
                f"table's saved metadata says so{' (this table asks for trust_remote_code, which is ignored)' * asked}"
                ". Register the model in code before searching: "
                f"st_magnitude.serving.lancedb.lancedb_embedding_function({self.name!r}) for a model folder (add "
                "trust_remote_code=True only for a folder whose code you trust), or "
                f"lancedb_embedding_function(model, name={self.name!r}) for a loaded model"
            )
        return model

    def ndims(self) -> int:
        return int(self._model().get_embedding_dimension())

    def query_vector(self, query: str) -> Any:
        """The query's vector (``encode_query``), for ``table.search(vector).distance_type(...)``."""
        try:
            return encode_queries(self._model(), [query])[0]
        except LanceDBRefusal:
            raise
        except ValueError as e:
            raise LanceDBRefusal(str(e)) from e

    def compute_query_embeddings(self, query: str, *args: Any, **kwargs: Any) -> list:
        """What a plain ``table.search(text)`` calls: refused when LanceDB's default ``l2`` loses the ranking."""
        model = self._model()
        kept = preserved_metrics(model)
        if "l2" not in kept:
            raise LanceDBRefusal(
                "table.search(text) ranks with LanceDB's default distance l2, which ranks this model's documents "
                "differently from its trained similarity (the model keeps document magnitude), and LanceDB encodes "
                "the text before any .distance_type(...) is applied. Search with "
                "st_magnitude.serving.lancedb.lancedb_search(table, text, model) (distance "
                f"{' or '.join(kept) or 'none'}), or pass the query vector yourself: "
                f"table.search(func.query_vector(text)).distance_type({(kept or ('dot',))[0]!r}); or export the "
                "model for an l2 store: st-magnitude convert MODEL VARIANT --store l2 --norm-texts CORPUS -o OUT"
            )
        return [self.query_vector(query)]

    def compute_source_embeddings(self, texts: Any, *args: Any, **kwargs: Any) -> list:
        try:
            return list(encode_documents(self._model(), self.sanitize_input(texts)))
        except LanceDBRefusal:
            raise
        except ValueError as e:
            raise LanceDBRefusal(str(e)) from e

    def generate_embeddings(self, texts: Any, *args: Any, **kwargs: Any) -> list:
        return self.compute_source_embeddings(texts)


def lancedb_embedding_function(
    model: Any, trust_remote_code: bool = False, name: str | None = None
) -> MagnitudeLanceEmbeddings:
    """Register ``model`` in this process and return the ``"st-magnitude"`` function for it.

    ``model``: a model folder (loaded now, with :func:`st_magnitude.model.load_model`, which loads this
    package's own modules without ``trust_remote_code``; ``trust_remote_code=True`` for any other custom code, said
    here in code and never read from a table) or a loaded SentenceTransformer. ``name``: the name a table saves
    (default: the folder as given, or an id for a loaded model); to search a saved table in a new process, register
    its model under the same name again.
    """
    if name is not None and not (isinstance(name, str) and name):
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    if isinstance(model, (str, os.PathLike)):
        from st_magnitude.model.load import load_model

        key = name or os.fspath(model)
        loaded = load_model(os.fspath(model), trust_remote_code=trust_remote_code)
    else:
        key = name or f"loaded-model-{id(model)}"
        loaded = model
    _MODELS[key] = loaded
    return _emb.get_registry().get("st-magnitude").create(name=key)


def _table_function(table: Any) -> tuple[str | None, MagnitudeLanceEmbeddings | None]:
    """The table's vector column computed by the ``st-magnitude`` function, and that function (or ``None``s)."""
    ours = {
        column: conf.function
        for column, conf in table.embedding_functions.items()
        if isinstance(conf.function, MagnitudeLanceEmbeddings)
    }
    if len(ours) > 1:
        raise ValueError(
            f"the table has {len(ours)} st-magnitude vector columns ({sorted(ours)}): search one with "
            "table.search(func.query_vector(text), vector_column_name=COLUMN).distance_type(...)"
        )
    return next(iter(ours.items()), (None, None))


def lancedb_search(table: Any, query: str, model: Any, k: int = 10, distance: str | None = None) -> Any:
    """Search ``table`` for ``query`` with the distance that keeps ``model``'s ranking (``dot``, ``cosine`` or
    ``l2``; default the first of them that does) and a limit of ``k``; returns the LanceDB query builder.

    The query is encoded by the table's ``st-magnitude`` function (``encode_query``; ``model``'s when the table has
    none), and the vector is passed to ``table.search`` with the distance set.
    """
    metric = best_metric(model, prefer=tuple(_STACK.metrics)) if distance is None else distance
    canonical = store_metric(model, metric, _STACK.title)
    column, func = _table_function(table)
    vector = func.query_vector(query) if func is not None else encode_queries(model, [query])[0]
    return table.search(vector, vector_column_name=column).distance_type(_STACK.metrics[canonical]).limit(k)


def index_and_search(model: Any, queries: list[str], documents: list[str], k: int, metric: str | None) -> list:
    """The agreement check's path (:func:`st_magnitude.serving.agreement.stack_ranking`): a table in a temporary
    folder whose vector column the ``st-magnitude`` function computes, searched with :func:`lancedb_search`."""
    import lancedb
    from lancedb.pydantic import LanceModel, Vector

    func = lancedb_embedding_function(model)

    class Doc(LanceModel):
        id: str
        text: str = func.SourceField()
        vector: Vector(func.ndims()) = func.VectorField()

    with tempfile.TemporaryDirectory() as tmp:
        table = lancedb.connect(tmp).create_table("docs", schema=Doc)
        table.add([{"id": str(i), "text": t} for i, t in enumerate(documents)])
        return [[int(r["id"]) for r in lancedb_search(table, q, model, k, metric).to_list()] for q in queries]
