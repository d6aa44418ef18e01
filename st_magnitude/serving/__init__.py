"""Serving adapters: a converted model in vector stores and frameworks (one adapter per stack) and ONNX Runtime.

Each adapter routes the two roles (queries through ``encode_query``, documents through ``encode_document``) and
chooses the store metric that ranks as the model was trained, refusing one that does not
(:func:`~st_magnitude.serving.metric.store_metric`). The stack itself is imported only when its adapter is used;
install them with ``pip install 'st-magnitude[deploy]'``. See docs/deployment.md.

One module per stack, imported by name (nothing is re-exported here, to keep the public API small):
``serving.<stack>`` for each vector store of the registry :mod:`st_magnitude.serving._stacks`, and ``serving.onnx``;
``serving.metric`` chooses the metric.
"""
