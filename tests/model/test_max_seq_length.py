"""A ``max_seq_length`` beyond the backbone's position embeddings is refused where it is read (the flag, a
``sentence_bert_config.json``, ``export_onnx``), in one line naming the value and the allowed maximum, instead of a
``RuntimeError`` at the first long text (or an ONNX export that fails on every text over the limit)."""

from __future__ import annotations

import json

import pytest
from helpers.onnx_marks import ONNX_MARKS

from st_magnitude._trust import InputFileError
from st_magnitude._trust.positions import position_limit
from st_magnitude.cli import main

pytestmark = [pytest.mark.toy_beir(n_docs=12, n_queries=4)]

LONG_TEXT = " ".join(["vitamin"] * 200)  # far more tokens than the tiny backbone's 128 positions


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("st-magnitude ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("command", ["evaluate", "diagnose", "export"])
def test_a_flag_beyond_the_positions_is_one_line(command, saved_tiny, toy, tmp_path, capsys):
    out = tmp_path / "out"
    argv = {
        "evaluate": ["evaluate", str(saved_tiny), "--data", str(toy)],
        "diagnose": ["diagnose", str(saved_tiny), "--data", str(toy), "--no-kappa", "--output", str(out)],
        "export": ["export", str(saved_tiny), "-o", str(out)],
    }[command]
    capsys.readouterr()
    assert main([*argv, "--max-seq-length", "100000"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "100000" in line and "allowed: 1 to 128" in line and "max_position_embeddings 128" in line
    assert not out.exists()


@pytest.mark.parametrize("onnx", [pytest.param(True, marks=ONNX_MARKS)])
def test_the_allowed_maximum_exports_and_encodes_a_long_text(saved_tiny, tmp_path, onnx):
    from st_magnitude.serving.onnx import OnnxEncoder

    assert main(["export", str(saved_tiny), "-o", str(tmp_path / "out"), "--max-seq-length", "128"]) == 0
    assert OnnxEncoder(tmp_path / "out").encode_document([LONG_TEXT]).shape == (1, 32)


def test_a_model_file_beyond_the_positions_is_named(saved_tiny, capsys):
    from st_magnitude.model.load import load_model

    path = saved_tiny / "sentence_bert_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "max_seq_length": 100000}))
    with pytest.raises(InputFileError, match=r"sentence_bert_config\.json: key 'max_seq_length': is 100000, more"):
        load_model(saved_tiny)
    capsys.readouterr()
    assert main(["inspect", str(saved_tiny)]) == 2
    assert "allowed: 1 to 128" in _one_line(capsys.readouterr().err)


def test_load_model_refuses_one_past_the_limit_and_takes_the_limit(saved_tiny):
    from st_magnitude.model.load import load_model

    with pytest.raises(ValueError, match=r"max_seq_length is 129, more than the 128 tokens"):
        load_model(saved_tiny, max_seq_length=129)
    model = load_model(saved_tiny, max_seq_length=128)
    assert model.max_seq_length == 128
    assert model.encode([LONG_TEXT]).shape == (1, 32)


@pytest.mark.parametrize("onnx", [pytest.param(True, marks=ONNX_MARKS)])
def test_export_onnx_refuses_a_model_set_beyond_the_limit(tiny_model, tmp_path, onnx):
    from st_magnitude.serving.onnx import export_onnx

    tiny_model.max_seq_length = 100000
    with pytest.raises(ValueError, match=r"max_seq_length is 100000, more than the 128 tokens.*allowed: 1 to 128"):
        export_onnx(tiny_model, tmp_path / "out", optimize=False)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("model_type", "pad", "limit"),
    [("bert", 0, 16), ("roberta", 1, 14), ("xlm-roberta", 1, 14), ("mpnet", 1, 14), ("roberta", 3, 12)],
)
def test_the_limit_is_what_the_backbone_takes(model_type, pad, limit):
    """The rule against the backbones themselves: ``limit`` tokens run, one more fails."""
    import torch
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.for_model(
        model_type,
        vocab_size=50,
        hidden_size=8,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=16,
        max_position_embeddings=16,
        pad_token_id=pad,
    )
    assert position_limit(config.to_dict())[0] == limit
    backbone = AutoModel.from_config(config).eval()
    with torch.no_grad():
        backbone(input_ids=torch.full((1, limit), 5))
        with pytest.raises((IndexError, RuntimeError)):
            backbone(input_ids=torch.full((1, limit + 1), 5))
