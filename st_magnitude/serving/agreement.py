"""Top-k through each serving stack's own path, against the package's exact search: the check behind
docs/deployment.md's table (tests/real/test_serving_minilm.py, benchmarks/bench_deploy.py).

:func:`reference_ranking` is what ``st-magnitude evaluate`` ranks by: ``encode_query`` / ``encode_document`` and the
exact top-k of ``model.similarity`` (:func:`st_magnitude.evaluation.exact_search`). :func:`stack_ranking` indexes the
documents and searches the queries through one stack, with this package's adapter for it.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["STACKS", "memoise_encodings", "reference_ranking", "stack_ranking", "top_k_agreement"]

#: the stacks :func:`stack_ranking` drives
STACKS = ("langchain", "llamaindex", "haystack", "chroma", "lancedb", "qdrant")


def reference_ranking(model: Any, queries: Sequence[str], documents: Sequence[str], k: int = 10) -> list[list[int]]:
    """Per query, the indices of the top ``k`` documents by the model's own similarity (exact search)."""
    from st_magnitude.evaluation._retrieval import encode_roles
    from st_magnitude.evaluation.ir import exact_search

    q, d = encode_roles(model, queries, documents)
    ids = [str(i) for i in range(len(documents))]
    qids = [f"q{i}" for i in range(len(queries))]
    res = exact_search(q, d, qids, ids, top_k=k, score_fn=model.similarity, ignore_identical_ids=False)
    return [[int(i) for i, _ in sorted(res[qid].items(), key=lambda kv: (-kv[1], int(kv[0])))] for qid in qids]


def memoise_encodings(model: Any) -> Any:
    """Cache ``encode_query`` / ``encode_document`` per text on this instance (the vectors are unchanged).

    For measurements that send one corpus through several stacks: each text is encoded once per role. Only this
    instance's two methods are replaced; sentence-transformers itself is not patched.
    """
    for role in ("query", "document"):
        original = getattr(model, f"encode_{role}")
        cache: dict[str, np.ndarray] = {}

        def cached(texts, _orig=original, _cache=cache, convert_to_tensor=False, convert_to_numpy=True, **kw):
            import torch

            single = isinstance(texts, str)
            texts = [texts] if single else list(texts)
            todo = [t for t in dict.fromkeys(texts) if t not in _cache]
            if todo:
                for t, v in zip(todo, _orig(todo, convert_to_numpy=True, **kw)):
                    _cache[t] = v
            out = np.stack([_cache[t] for t in texts])
            out = out[0] if single else out
            return torch.from_numpy(out) if convert_to_tensor else out

        setattr(model, f"encode_{role}", cached)
    return model


def top_k_agreement(a: Sequence[Sequence[int]], b: Sequence[Sequence[int]]) -> tuple[float, float]:
    """(mean |top-k(a) ∩ top-k(b)| / k, fraction of queries whose ordered top-k lists are identical)."""
    if len(a) != len(b) or not a:
        raise ValueError(f"rankings of {len(a)} and {len(b)} queries: need the same, non-zero number")
    overlap = [len(set(x) & set(y)) / max(len(x), 1) for x, y in zip(a, b)]
    same = [list(x) == list(y) for x, y in zip(a, b)]
    return float(np.mean(overlap)), float(np.mean(same))


def stack_ranking(
    stack: str, model: Any, queries: Sequence[str], documents: Sequence[str], k: int = 10, metric: str | None = None
) -> list[list[int]]:
    """Index ``documents`` and search ``queries`` in ``stack`` (one of :data:`STACKS`) through its adapter.

    ``metric``: the store metric to ask for (a stack-neutral name: dot, cosine, l2); ``None`` lets the adapter pick
    (cosine for LangChain and LlamaIndex, whose in-memory stores only score with cosine).
    """
    if stack not in STACKS:
        raise ValueError(f"stack must be one of {STACKS}, got {stack!r}")
    return _RUNNERS[stack](model, list(queries), list(documents), k, metric)


def _langchain(model, queries, documents, k, metric):
    from st_magnitude.serving.langchain import langchain_vector_store

    if metric not in (None, "cosine"):
        raise ValueError("LangChain's InMemoryVectorStore scores with cosine only")
    store = langchain_vector_store(model)
    store.add_texts(documents, ids=[str(i) for i in range(len(documents))])
    return [[int(doc.id) for doc in store.similarity_search(q, k=k)] for q in queries]


def _llamaindex(model, queries, documents, k, metric):
    from llama_index.core import VectorStoreIndex
    from llama_index.core.schema import TextNode

    from st_magnitude.serving.llamaindex import MagnitudeLlamaIndexEmbedding

    if metric not in (None, "cosine"):
        raise ValueError("LlamaIndex's default SimpleVectorStore scores with cosine only")
    emb = MagnitudeLlamaIndexEmbedding(model)
    nodes = [TextNode(text=t, id_=str(i)) for i, t in enumerate(documents)]
    retriever = VectorStoreIndex(nodes, embed_model=emb).as_retriever(similarity_top_k=k)
    return [[int(n.node.node_id) for n in retriever.retrieve(q)] for q in queries]


def _haystack(model, queries, documents, k, metric):
    from haystack import Document
    from haystack.components.retrievers.in_memory import InMemoryEmbeddingRetriever

    from st_magnitude.serving.haystack import (
        MagnitudeHaystackDocumentEmbedder,
        MagnitudeHaystackTextEmbedder,
        haystack_document_store,
    )

    store = haystack_document_store(model, metric)
    docs = [Document(id=str(i), content=t) for i, t in enumerate(documents)]
    store.write_documents(MagnitudeHaystackDocumentEmbedder(model).run(docs)["documents"])
    retriever = InMemoryEmbeddingRetriever(store, top_k=k)
    embedder = MagnitudeHaystackTextEmbedder(model)
    out = []
    for q in queries:
        found = retriever.run(query_embedding=embedder.run(q)["embedding"])["documents"]
        out.append([int(d.id) for d in found])
    return out


def _chroma(model, queries, documents, k, metric):
    import chromadb
    from chromadb.config import Settings

    from st_magnitude.serving.chroma import chroma_collection

    client = chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False))
    col = chroma_collection(client, f"c{uuid.uuid4().hex[:12]}", model, metric)
    col.add(ids=[str(i) for i in range(len(documents))], documents=documents)
    res = col.query(query_texts=queries, n_results=k)
    client.delete_collection(col.name)
    return [[int(i) for i in row] for row in res["ids"]]


def _lancedb(model, queries, documents, k, metric):
    import lancedb
    from lancedb.pydantic import LanceModel, Vector

    from st_magnitude.serving.lancedb import lancedb_embedding_function, lancedb_search

    func = lancedb_embedding_function(model)

    class Doc(LanceModel):
        id: str
        text: str = func.SourceField()
        vector: Vector(func.ndims()) = func.VectorField()

    with tempfile.TemporaryDirectory() as tmp:
        table = lancedb.connect(tmp).create_table("docs", schema=Doc)
        table.add([{"id": str(i), "text": t} for i, t in enumerate(documents)])
        return [[int(r["id"]) for r in lancedb_search(table, q, model, k, metric).to_list()] for q in queries]


def _qdrant(model, queries, documents, k, metric):
    from qdrant_client import QdrantClient
    from qdrant_client.models import PointStruct

    from st_magnitude.serving._encode import encode_documents, encode_queries
    from st_magnitude.serving.qdrant import qdrant_vector_params

    client = QdrantClient(":memory:")
    client.create_collection("docs", vectors_config=qdrant_vector_params(model, metric))
    vectors = encode_documents(model, documents)
    client.upsert("docs", points=[PointStruct(id=i, vector=v.tolist()) for i, v in enumerate(vectors)])
    out = [
        [int(p.id) for p in client.query_points("docs", query=q.tolist(), limit=k).points]
        for q in encode_queries(model, queries)
    ]
    client.close()
    return out


_RUNNERS = {
    "langchain": _langchain,
    "llamaindex": _llamaindex,
    "haystack": _haystack,
    "chroma": _chroma,
    "lancedb": _lancedb,
    "qdrant": _qdrant,
}
