"""A broken file in a model folder is one line naming it, from every command that reads the folder.

Before, each of these ended in a traceback from inside sentence-transformers, transformers or safetensors (exit 1):
a ``sentence_bert_config.json`` with a ``model_name_or_path`` key (``TypeError: got multiple values``), a truncated
or corrupt ``model.safetensors`` (``SafetensorError``), a symlink loop in the folder (``RuntimeError: Symlink
loop``); a broken ``config_sentence_transformers.json`` was one line without the file's name or line.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from st_magnitude._trust import InputFileError, check_safetensors
from st_magnitude.cli import main
from st_magnitude.model.load import load_model


@pytest.fixture(scope="module")
def plain(tiny_bert_dir, tmp_path_factory):
    from conftest import build_tiny_st

    root = tmp_path_factory.mktemp("folder_files")
    build_tiny_st(tiny_bert_dir).save(str(root / "plain"))
    return root / "plain"


def _sbert_key(model: Path) -> None:
    cfg = json.loads((model / "sentence_bert_config.json").read_text())
    (model / "sentence_bert_config.json").write_text(json.dumps({**cfg, "model_name_or_path": "elsewhere"}))


def _st_config(model: Path) -> None:
    (model / "config_sentence_transformers.json").write_text('{\n  "similarity_fn_name": "dot",\n  oops\n}')


def _truncated_header(model: Path) -> None:
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])


def _truncated_data(model: Path) -> None:
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])


def _corrupt(model: Path) -> None:
    (model / "model.safetensors").write_bytes(b"\xff" * 7 + b"\x7f" + b"garbage")


def _loop(model: Path) -> None:
    (model / "loop1").symlink_to("loop2")
    (model / "loop2").symlink_to("loop1")


BROKEN = {
    "sentence_bert_config model_name_or_path": (_sbert_key, "sentence_bert_config.json: key 'model_name_or_path'"),
    "config_sentence_transformers not JSON": (_st_config, "config_sentence_transformers.json:3: not valid JSON"),
    "safetensors truncated in the header": (_truncated_header, "model.safetensors: declares a"),
    "safetensors truncated in the data": (_truncated_data, "model.safetensors: key"),
    "safetensors corrupt": (_corrupt, "model.safetensors: declares a"),
    "symlink loop": (_loop, "is a symlink loop"),
}


def _error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.strip() and "it/s]" not in line]


@pytest.mark.parametrize("case", list(BROKEN))
def test_every_command_names_the_broken_file_in_one_line(case, plain, tmp_path, capsys):
    breaks, message = BROKEN[case]
    model = shutil.copytree(plain, tmp_path / "m", symlinks=True)
    breaks(model)
    commands = {
        "inspect": ["inspect", str(model)],
        "convert": ["convert", str(model), "qnorm", "-o", str(tmp_path / "out")],
        "convert --trust-remote-code": [
            "convert",
            str(model),
            "dot",
            "-o",
            str(tmp_path / "o2"),
            "--trust-remote-code",
        ],
    }
    if case in ("symlink loop", "config_sentence_transformers not JSON"):
        commands["strip"] = ["strip", str(model), "-o", str(tmp_path / "o3")]
    for name, argv in commands.items():
        assert main(argv) == 2, name
        lines = _error_lines(capsys.readouterr().err)
        assert len(lines) == 1 and message in lines[0] and str(model) in lines[0], (name, lines)
    assert not any((tmp_path / o).exists() for o in ("out", "o2", "o3"))
    with pytest.raises(InputFileError, match=message.split(": ", 1)[-1].split(":")[0]):
        load_model(str(model))


def test_a_well_formed_folder_still_loads(plain):
    assert load_model(str(plain)).encode_document(["a b"]).shape == (1, 32)


def test_the_safetensors_check_against_files_written_by_safetensors(tmp_path):
    path = tmp_path / "w.safetensors"
    save_file({"a": torch.zeros(3, 4), "b": torch.ones(5, dtype=torch.int64), "c": torch.zeros(0)}, str(path))
    check_safetensors(path)  # a file written by the reference implementation passes
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])

    def rewrite(edit) -> bytes:
        h = json.loads(json.dumps(header))
        edit(h)
        text = json.dumps(h).encode()
        return struct.pack("<Q", len(text)) + text + raw[8 + n :]

    cases = {
        "short": (raw[:5], "too short"),
        "data cut": (raw[:-4], "lie outside the file"),
        "wrong shape": (rewrite(lambda h: h["a"].update(shape=[3, 5])), "a F32 tensor of shape [3, 5] needs 60"),
        "unknown dtype": (rewrite(lambda h: h["a"].update(dtype="F33")), "key 'a.dtype': must be one of"),
        "offsets not ints": (rewrite(lambda h: h["b"].update(data_offsets=[0, "x"])), "must be two integers"),
        "header not JSON": (struct.pack("<Q", 3) + b"{x}" + raw[8 + n :], ":1: not valid JSON"),
    }
    for name, (data, message) in cases.items():
        path.write_bytes(data)
        with pytest.raises(InputFileError, match=message.replace("[", r"\[").replace("]", r"\]")):
            check_safetensors(path)
