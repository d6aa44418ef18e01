"""A backbone's ``config.json`` whose ``max_position_embeddings`` is no positive integer, or disagrees with the
position table of the weights beside it, is one line naming the file and the key, from every command and
``load_model``.

Before, ``"128"`` ended in huggingface_hub's ``StrictDataclassFieldValidationError`` traceback, and ``0``, ``512`` or
a missing key (BERT's default 512) in transformers' ``ignore_mismatched_sizes`` traceback after the weights were read.
A missing key stays legal where the weights hold no absolute position table (rotary or relative positions): no cap
from the config. The reference for what must be refused is transformers' own loader: every value refused here fails
there too, and the value it loads is accepted.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from st_magnitude._trust import InputFileError, check_model_files
from st_magnitude.cli import main
from st_magnitude.model.load import load_model


@pytest.fixture(scope="module")
def plain(tiny_bert_dir, tmp_path_factory):
    from conftest import build_tiny_st

    root = tmp_path_factory.mktemp("positions_config")
    build_tiny_st(tiny_bert_dir).save(str(root / "plain"))
    return root / "plain"


def _edit(model: Path, key: str, value) -> None:
    path = model / "config.json"
    config = json.loads(path.read_text())
    if value is _MISSING:
        del config[key]
    else:
        config[key] = value
    path.write_text(json.dumps(config))


_MISSING = object()
ROWS = "holds the position table 'embeddings.position_embeddings.weight' of 128 rows"
UNSTATED = f'is missing, but model.safetensors {ROWS}; add "max_position_embeddings": 128'
CASES = {
    "the string '128'": ("max_position_embeddings", "128", "must be an integer, got a string '128'"),
    "missing (BERT's default is 512)": ("max_position_embeddings", _MISSING, UNSTATED),
    "0": ("max_position_embeddings", 0, "must be ≥ 1, got 0"),
    "-1": ("max_position_embeddings", -1, "must be ≥ 1, got -1"),
    "true": ("max_position_embeddings", True, "must be an integer, got a boolean True"),
    "1.5": ("max_position_embeddings", 1.5, "must be an integer, got a number 1.5"),
    "128.0": ("max_position_embeddings", 128.0, "must be an integer, got a number 128.0"),
    "null": ("max_position_embeddings", None, "must be an integer, got null"),
    "512": ("max_position_embeddings", 512, f"is 512, but model.safetensors {ROWS}; allowed: 128"),
    "2^63": ("max_position_embeddings", 2**63, f"is 9223372036854775808, but model.safetensors {ROWS}"),
    "10^400": ("max_position_embeddings", 10**400, "must be a finite number"),
    "model_type a list": ("model_type", ["bert"], "must be a string, got a list"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_position_count_that_is_no_positive_integer_or_not_the_weights_is_one_line(case, plain, tmp_path, capsys):
    key, value, message = CASES[case]
    model = shutil.copytree(plain, tmp_path / "m")
    _edit(model, key, value)
    for argv in (["inspect", str(model)], ["convert", str(model), "qnorm", "-o", str(tmp_path / "out")]):
        assert main(argv) == 2, argv
        lines = [line for line in capsys.readouterr().err.splitlines() if line.strip() and "it/s]" not in line]
        assert len(lines) == 1 and f"{model / 'config.json'}: key '{key}': {message}" in lines[0], lines
    assert not (tmp_path / "out").exists()
    with pytest.raises(InputFileError, match="config.json: key"):
        load_model(str(model))


@pytest.mark.parametrize("case", ["the string '128'", "missing (BERT's default is 512)", "0", "512"])
def test_transformers_itself_cannot_load_what_is_refused(case, plain, tmp_path):
    from transformers import AutoModel

    key, value, _ = CASES[case]
    model = shutil.copytree(plain, tmp_path / "m")
    _edit(model, key, value)
    with pytest.raises(Exception):  # noqa: B017, PT011 - any error: the independent loader fails on it too
        AutoModel.from_pretrained(str(model))


def test_the_value_the_weights_hold_loads(plain):
    assert json.loads((plain / "config.json").read_text())["max_position_embeddings"] == 128
    assert load_model(str(plain)).encode_document(["a b"]).shape == (1, 32)


def test_a_roberta_style_pad_token_id_is_an_integer(plain, tmp_path):
    model = shutil.copytree(plain, tmp_path / "m")
    _edit(model, "model_type", "roberta")
    _edit(model, "pad_token_id", "1")  # read for the limit: positions start after the padding index
    with pytest.raises(InputFileError, match=r"config\.json: key 'pad_token_id': must be an integer or null"):
        check_model_files(model)


def test_a_missing_key_is_legal_where_the_weights_hold_no_position_table(tmp_path):
    # rotary or relative positions: no absolute table, so no cap from the config (the model's defaults apply)
    folder = tmp_path / "rotary"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "modernbert", "hidden_size": 8}))
    save_file({"embeddings.tok_embeddings.weight": torch.zeros(10, 8)}, str(folder / "model.safetensors"))
    check_model_files(folder)
    for value in (8192, 2**63):  # stated, with no table to compare: any positive integer
        (folder / "config.json").write_text(json.dumps({"model_type": "modernbert", "max_position_embeddings": value}))
        check_model_files(folder)


def test_only_an_absolute_position_table_is_compared(tmp_path):
    folder = tmp_path / "layout"
    folder.mkdir()
    config = {"model_type": "layoutlm", "max_position_embeddings": 512, "max_2d_position_embeddings": 1024}
    (folder / "config.json").write_text(json.dumps(config))
    tables = {
        "embeddings.position_embeddings.weight": torch.zeros(512, 4),
        "embeddings.x_position_embeddings.weight": torch.zeros(1024, 4),  # a 2-D layout table: another key's size
    }
    save_file(tables, str(folder / "model.safetensors"))
    check_model_files(folder)
    config["max_position_embeddings"] = 1024
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputFileError, match=r"key 'max_position_embeddings': is 1024, but .* of 512 rows"):
        check_model_files(folder)


def test_an_empty_position_table_is_named_in_the_weights(tmp_path):
    folder = tmp_path / "empty"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "bert"}))
    save_file({"embeddings.position_embeddings.weight": torch.zeros(0, 4)}, str(folder / "model.safetensors"))
    with pytest.raises(InputFileError, match=r"model\.safetensors: key '.*': is a position table of 0 rows"):
        check_model_files(folder)
