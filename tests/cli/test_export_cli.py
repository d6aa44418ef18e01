"""`st-magnitude export` and `st-magnitude evaluate --backend onnx`: the export's metrics are torch's."""

from __future__ import annotations

import pytest
from helpers.onnx_marks import ONNX_MARKS

from st_magnitude import apply_similarity
from st_magnitude.cli import main
from st_magnitude.evaluation.runner import evaluate_folders
from st_magnitude.serving.onnx_model import BACKENDS, onnx_encoder

pytestmark = [
    pytest.mark.toy_beir(n_docs=30, n_queries=8),
    *ONNX_MARKS,
]


def test_export_writes_a_new_folder_and_refuses_a_non_empty_one(saved_tiny, tmp_path, capsys):
    from st_magnitude.serving.onnx import OnnxEncoder

    out = tmp_path / "onnx"
    assert main(["export", str(saved_tiny), "-o", str(out)]) == 0
    assert "ONNX export written to" in capsys.readouterr().out
    assert OnnxEncoder(out).encode_query(["vitamin d"]).shape == (1, 32)
    assert main(["export", str(saved_tiny), "-o", str(saved_tiny)]) == 2
    assert "is the model folder" in capsys.readouterr().err
    assert main(["export", str(saved_tiny), "-o", str(out)]) == 2
    assert "is not empty" in capsys.readouterr().err
    assert main(["export", str(saved_tiny), "-o", str(tmp_path / "q"), "--quantize", "int4"]) == 2
    assert "invalid choice: 'int4'" in capsys.readouterr().err


def test_evaluate_with_the_onnx_backend_gives_torch_metrics(tiny_model, toy):
    model = apply_similarity(tiny_model, "qnorm")
    torch_row = evaluate_folders(model, [toy])[0]
    onnx_row = evaluate_folders(model, [toy], encoder=onnx_encoder("onnx", threads=1))[0]
    for metric in ("ndcg@10", "recall@100", "mrr@10", "pooled_auc", "per_query_auc"):
        assert onnx_row[metric] == pytest.approx(torch_row[metric], abs=1e-5), metric


def test_evaluate_cli_backend_and_refusals(saved_tiny, toy, capsys):
    assert main(["evaluate", str(saved_tiny), "--data", str(toy), "--backend", "onnx-int8"]) == 0
    assert "ndcg@10" in capsys.readouterr().out
    rc = main(["evaluate", str(saved_tiny), "--data", str(toy), "--backend", "onnx", "--similarity", "dot"])
    assert rc == 2 and "use backend torch" in capsys.readouterr().err
    assert main(["evaluate", str(saved_tiny), "--data", str(toy), "--backend", "tf"]) == 2
    choices = "choose from 'torch', 'onnx', 'onnx-int8'"
    assert choices in capsys.readouterr().err and BACKENDS == ("torch", "onnx", "onnx-int8")
