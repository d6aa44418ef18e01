"""An ONNX export's ``st_magnitude_onnx.json``: what :func:`~st_magnitude.serving.onnx.export_onnx` records and what
:class:`~st_magnitude.serving.onnx.OnnxEncoder` checks before it trusts a file of the export.

The config records the graphs' inputs, the tokenizer's ``max_seq_length``, the ``position_limit`` of the backbone
(the most tokens its position embeddings take, :func:`~st_magnitude._trust.positions.position_limit`; ``null`` when
its config states none), the vector ``dimension``, the model's ``similarity`` and the export settings, the identity
both graphs carry in their metadata, and ``files``: the sha256 of every other file the export wrote (both graphs,
every tokenizer file). :func:`read_export_config` checks each key
(type, range, choices; a ``keep_f32`` that is a regular expression, and empty unless ``quantize`` is ``int8``; a
``max_seq_length`` within ``position_limit``, so a longer text is truncated instead of failing inside ONNX Runtime);
:func:`read_export_files` then reads the folder through
:func:`~st_magnitude._trust.digests.read_recorded_files` (exactly the recorded files, none linked outside, each with
its recorded digest) and parses every tokenizer JSON file with the trust boundary's reader, so a broken one is named
before transformers reads it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from st_magnitude._trust import (
    Fields,
    InputFileError,
    is_sha256,
    parse_json_bytes,
    read_json,
    read_recorded_files,
)
from st_magnitude._trust.json_files import NAME_PATTERN
from st_magnitude._trust.positions import check_max_seq_length
from st_magnitude.serving.onnx_graphs import QUANTIZATIONS

__all__ = ["CONFIG", "INPUTS", "ROLE_GRAPHS", "SIMILARITY_FN_NAMES", "read_export_config", "read_export_files"]

#: the graphs the export writes, by role
ROLE_GRAPHS = {"query": "query.onnx", "document": "document.onnx"}
CONFIG = "st_magnitude_onnx.json"
#: the tokenizer outputs a graph may take
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
#: sentence-transformers' similarity function names (``model.similarity_fn_name``)
SIMILARITY_FN_NAMES = ("cosine", "dot", "euclidean", "manhattan")
_KEYS = (
    "inputs",
    "max_seq_length",
    "position_limit",
    "dimension",
    "similarity",
    "optimize",
    "quantize",
    "keep_f32",
    "identity",
    "files",
)


def _inputs_ok(value: list) -> str | None:
    if not value or any(v not in INPUTS for v in value) or len(set(value)) != len(value):
        return f"must list distinct names from {list(INPUTS)}, got {value!r}"
    return None


def _hex64(value: str) -> str | None:
    return None if is_sha256(value) else "must be a sha256 hex digest (64 characters 0-9a-f)"


def _regex(value: str) -> str | None:
    try:
        re.compile(value)
    except re.error as exc:
        return f"must be a regular expression ({exc}), got {value!r}"
    return None


def _files_ok(value: dict) -> str | None:
    for name, digest in value.items():
        if not NAME_PATTERN.fullmatch(name) or name == CONFIG:
            return f"{name!r} must be a name of letters, digits, '-', '_' or '.' (a file in the export folder)"
        if not is_sha256(digest):
            return f"the digest of {name!r} must be a sha256 hex digest (64 characters 0-9a-f), got {digest!r}"
    missing = [g for g in ROLE_GRAPHS.values() if g not in value]
    if missing:
        return f"must list both graphs ({', '.join(ROLE_GRAPHS.values())}); {', '.join(missing)} is not listed"
    return None


def read_export_config(folder: str | Path) -> dict[str, Any]:
    """The checked ``st_magnitude_onnx.json`` of an export folder (:class:`~st_magnitude._trust.InputFileError`
    naming the file and key otherwise; an export without ``files``, from before the digests, must be re-exported)."""
    path = Path(folder) / CONFIG
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: export the model with st_magnitude.serving.onnx.export_onnx")
    f = Fields(read_json(path), path)
    f.refuse_unknown(_KEYS)
    quantize = f.get("quantize", str, choices=QUANTIZATIONS)
    keep_f32 = f.get("keep_f32", str, "", check=_regex)
    if keep_f32 and quantize != "int8":
        raise f.error("keep_f32", f"must be '' when 'quantize' is {quantize!r} (only int8 keeps nodes in float32)")
    if "files" not in f:
        raise f.error("files", "is missing: this export records no digests of its files; re-export the model")
    if "position_limit" not in f:
        raise f.error(
            "position_limit", "is missing: this export records no position limit of its backbone; re-export the model"
        )
    limit = f.get("position_limit", (int, type(None)), lo=1)
    recorded = None if limit is None else (limit, "its key 'position_limit', recorded at export")
    return {
        "inputs": f.get("inputs", list, check=_inputs_ok),
        "max_seq_length": f.get(
            "max_seq_length", (int, type(None)), lo=1, check=lambda v: check_max_seq_length(v, recorded)
        ),
        "position_limit": limit,
        "dimension": f.get("dimension", int, lo=1),
        "similarity": f.get("similarity", (str, type(None)), None, choices=(*SIMILARITY_FN_NAMES, None)),
        "optimize": f.get("optimize", bool),
        "quantize": quantize,
        "keep_f32": keep_f32,
        "identity": f.get("identity", str, check=_hex64),
        "files": f.get("files", dict, check=_files_ok),
    }


def read_export_files(folder: str | Path, config: dict[str, Any]) -> dict[str, bytes]:
    """The bytes of every file ``config`` records, checked by digest, with every JSON file (the tokenizer's) parsed
    through the trust boundary and required to hold an object."""
    folder = Path(folder)
    blobs = read_recorded_files(folder, config["files"], CONFIG)
    for name, raw in blobs.items():
        if name.endswith(".json"):
            Fields(parse_json_bytes(raw, folder / name), folder / name)
    return blobs


def check_dimension(config: dict[str, Any], folder: Path, graph: str, shape: list[Any]) -> None:
    """The config's ``dimension`` must be the width of the graph's output (``[batch, dim]``)."""
    width = shape[-1] if shape else None
    if len(shape) != 2 or not isinstance(width, int):
        raise InputFileError(folder / graph, f"outputs 'sentence_embedding' of shape {shape}, not [batch, dimension]")
    if width != config["dimension"]:
        raise InputFileError(
            folder / CONFIG,
            f"key 'dimension': is {config['dimension']}, but {graph} outputs vectors of {width}; re-export the model",
        )
