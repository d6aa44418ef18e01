"""ONNX export per role: ONNX Runtime reproduces encode_query / encode_document and the exact top-10."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from conftest import build_tiny_st
from helpers.deploy_kit import TOY_DOCS, TOY_QUERIES

from st_magnitude import apply_similarity, convert_for_store
from st_magnitude.serving.agreement import reference_ranking

pytestmark = [
    pytest.mark.filterwarnings("ignore::st_magnitude.MagnitudeCollapseWarning"),
    pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning"),
    pytest.mark.skipif(
        importlib.util.find_spec("onnx") is None or importlib.util.find_spec("onnxruntime") is None,
        reason="onnx / onnxruntime are not installed (pip install 'st-magnitude[deploy]')",
    ),
]


@pytest.mark.parametrize(("variant", "store"), [("qnorm", "dot"), ("learnable", "cosine")])
def test_onnx_graphs_match_the_model(tiny_bert_dir, tmp_path, variant, store):
    from st_magnitude.serving.onnx import OnnxEncoder, export_onnx

    model = convert_for_store(build_tiny_st(tiny_bert_dir), variant, store, documents=TOY_DOCS)
    enc = OnnxEncoder(export_onnx(model, tmp_path / "onnx"))
    q, d = enc.encode_query(TOY_QUERIES, batch_size=3), enc.encode_document(TOY_DOCS, batch_size=7)
    assert np.abs(q - model.encode_query(TOY_QUERIES, convert_to_numpy=True)).max() <= 1e-5
    assert np.abs(d - model.encode_document(TOY_DOCS, convert_to_numpy=True)).max() <= 1e-5
    # the top-10 of the ONNX vectors (dot; exact, ties by position) is the trained model's exact search
    trained = apply_similarity(build_tiny_st(tiny_bert_dir), variant)
    scores = q.astype(np.float64) @ d.astype(np.float64).T
    got = [list(np.lexsort((np.arange(len(row)), -row))[:10]) for row in scores]
    assert got == reference_ranking(trained, TOY_QUERIES, TOY_DOCS)


def test_missing_export_is_named(tmp_path):
    from st_magnitude.serving.onnx import OnnxEncoder

    with pytest.raises(FileNotFoundError, match="export_onnx"):
        OnnxEncoder(tmp_path)
