"""Serving adapters: a converted model in LangChain, LlamaIndex, Haystack, Chroma, LanceDB, Qdrant and ONNX Runtime.

Each adapter routes the two roles (queries through ``encode_query``, documents through ``encode_document``) and
chooses the store metric that ranks as the model was trained, refusing one that does not
(:func:`~st_magnitude.serving.metric.store_metric`). The stack itself is imported only when its adapter is used;
install them with ``pip install 'st-magnitude[deploy]'``. See docs/deployment.md.

One module per stack, imported by name (nothing is re-exported here, to keep the public API small):
``serving.langchain``, ``serving.llamaindex``, ``serving.haystack``, ``serving.chroma``, ``serving.lancedb``,
``serving.qdrant``, ``serving.onnx``; ``serving.metric`` chooses the metric.
"""
