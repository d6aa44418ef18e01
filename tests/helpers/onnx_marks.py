"""The marks every ONNX test module carries: the exporter's tracing warnings ignored, skipped without onnx."""

from __future__ import annotations

import importlib.util

import pytest

ONNX_MARKS = [
    pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning:torch.onnx.*"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.skipif(
        importlib.util.find_spec("onnx") is None or importlib.util.find_spec("onnxruntime") is None,
        reason="onnx / onnxruntime are not installed (pip install 'st-magnitude[deploy]')",
    ),
]
