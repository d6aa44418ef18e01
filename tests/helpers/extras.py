"""The optional packages the tests use, the extra of ``pyproject.toml`` that installs each, and the one skip.

A test that needs one calls :func:`need_extra` (or carries a skip mark whose reason names the extra): without the
package it skips with ``pip install 'st-magnitude[EXTRA]'`` in its reason. ``tests/test_optional_imports.py`` checks
that every import of these packages in the tests is guarded so, and that this table agrees with ``pyproject.toml``;
``.ci/run`` runs the README's test command without the extras, then runs exactly the tests that skipped for an
extra (``tests/conftest.py`` lists them) after installing it.
"""

from __future__ import annotations

import pytest

#: import name -> (distribution, extra that installs it)
OPTIONAL: dict[str, tuple[str, str]] = {
    "chromadb": ("chromadb", "deploy"),
    "lancedb": ("lancedb", "deploy"),
    "qdrant_client": ("qdrant-client", "deploy"),
    "haystack": ("haystack-ai", "deploy"),
    "llama_index": ("llama-index-core", "deploy"),
    "langchain_core": ("langchain-core", "deploy"),
    "onnx": ("onnx", "deploy"),
    "onnxruntime": ("onnxruntime", "deploy"),
    "faiss": ("faiss-cpu", "faiss"),
    "peft": ("peft", "lora"),
}

#: package modules that import an optional package when they are imported (the serving stacks' adapters) or when
#: they are used (the ONNX export): a test importing one is guarded like an import of the package
OPTIONAL_AT_IMPORT: dict[str, str] = {
    "st_magnitude.serving.onnx": "onnx",
    "st_magnitude.serving.chroma": "chromadb",
    "st_magnitude.serving.lancedb": "lancedb",
    "st_magnitude.serving.haystack": "haystack",
    "st_magnitude.serving.llamaindex": "llama_index",
    "st_magnitude.serving.langchain": "langchain_core",
}

#: the words every such skip reason contains (``conftest.py`` collects those skips for ``.ci/run``)
INSTALL_HINT = "pip install 'st-magnitude["


def skip_reason(module: str) -> str:
    """``'chromadb is not installed (pip install 'st-magnitude[deploy]')``: the reason of every extra's skip."""
    distribution, extra = OPTIONAL[module.split(".")[0]]
    return f"{distribution} is not installed ({INSTALL_HINT}{extra}]')"


def need_extra(module: str):
    """``module`` imported, or the test skipped naming the extra that installs it."""
    return pytest.importorskip(module, reason=skip_reason(module), exc_type=ImportError)
