"""Serving adapters: a converted model in LangChain, LlamaIndex, Haystack, Chroma, LanceDB, Qdrant and ONNX Runtime.

Each adapter routes the two roles (queries through ``encode_query``, documents through ``encode_document``) and
chooses the store metric that ranks as the model was trained, refusing one that does not
(:func:`~st_magnitude.serving.metric.store_metric`). The stack itself is imported only when its adapter is used;
install them with ``pip install 'st-magnitude[deploy]'``. See docs/deployment.md.
"""

from __future__ import annotations

from st_magnitude._lazy import lazy_exports

__all__ = [
    "MagnitudeChromaEmbeddingFunction",
    "MagnitudeHaystackDocumentEmbedder",
    "MagnitudeHaystackTextEmbedder",
    "MagnitudeLangChainEmbeddings",
    "MagnitudeLlamaIndexEmbedding",
    "OnnxEncoder",
    "best_metric",
    "chroma_collection",
    "export_onnx",
    "haystack_document_store",
    "lancedb_embedding_function",
    "lancedb_search",
    "langchain_vector_store",
    "qdrant_vector_params",
    "store_metric",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        ".metric": ("best_metric", "store_metric"),
        ".langchain": ("MagnitudeLangChainEmbeddings", "langchain_vector_store"),
        ".llamaindex": ("MagnitudeLlamaIndexEmbedding",),
        ".haystack": ("MagnitudeHaystackDocumentEmbedder", "MagnitudeHaystackTextEmbedder", "haystack_document_store"),
        ".chroma": ("MagnitudeChromaEmbeddingFunction", "chroma_collection"),
        ".lancedb": ("lancedb_embedding_function", "lancedb_search"),
        ".qdrant": ("qdrant_vector_params",),
        ".onnx": ("OnnxEncoder", "export_onnx"),
    },
)
