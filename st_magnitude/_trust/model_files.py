"""Every config file and weights header of a local model folder, read through the trust boundary before a loader.

sentence-transformers and transformers read these files themselves, and a broken one ends in a traceback from deep
inside them (``TypeError: got multiple values for keyword argument 'model_name_or_path'`` for a
``sentence_bert_config.json`` naming that key, ``SafetensorError: invalid header length`` for a truncated
``model.safetensors``, a ``JSONDecodeError`` without the file's name). :func:`check_model_files` reads each of them
first with :func:`read_json` / :class:`Fields` and :func:`check_safetensors`, so such a folder is one
:class:`InputFileError` naming the file and the line or key. It runs after
:func:`~st_magnitude._trust.paths.check_model_folder` (every path it follows stays inside the folder).

A backbone's ``config.json`` is checked for the keys the package reads from it (``model_type``, ``pad_token_id``,
``max_position_embeddings``: the position limit every ``max_seq_length`` is checked against) and against the weights
beside it: transformers builds a position table of ``max_position_embeddings`` rows and refuses weights of another
size with a traceback (``StrictDataclassFieldValidationError`` for ``"128"``, ``ignore_mismatched_sizes`` for ``0``
or a missing key whose architecture default differs). So ``max_position_embeddings``, when present, is a positive
integer equal to the rows of the safetensors' absolute position table (a tensor named ``…position_embeddings.weight``)
where there is one; when missing, the weights must hold no such table (rotary or relative positions: no cap from
the config, the tokenizer's and the model's own defaults apply).
"""

from __future__ import annotations

import os
from pathlib import Path

from st_magnitude._trust.errors import InputFileError
from st_magnitude._trust.json_files import Fields, read_json
from st_magnitude._trust.paths import MAX_ROUTER_DEPTH, router_config
from st_magnitude._trust.positions import PADDING_OFFSET_TYPES, check_max_seq_length, position_limit
from st_magnitude._trust.weights import check_safetensors

__all__ = ["check_model_files"]

#: the JSON files sentence-transformers reads in a model folder or a module's folder
CONFIG_FILES = ("config_sentence_transformers.json", "sentence_bert_config.json", "config.json", "router_config.json")
#: keys of ``sentence_bert_config.json`` that sentence-transformers sets itself and that must be objects
_KWARGS = ("model_kwargs", "processor_kwargs", "config_kwargs", "model_args", "tokenizer_args", "config_args")
_SIMILARITY_FN_NAMES = ("cosine", "dot", "euclidean", "manhattan")
#: the name (last part) of a BERT-style absolute position table: ``max_position_embeddings`` rows × hidden size
POSITION_TABLE = "position_embeddings.weight"


def _module_folders(root: Path) -> list[Path]:
    folders = [root]
    modules = root / "modules.json"
    entries = read_json(modules) if modules.is_file() else []
    for i, entry in enumerate(entries if isinstance(entries, list) else []):
        f = Fields(entry, modules, f"entry {i}", what=f"entry {i}")
        f.get("type", str)
        rel = f.get("path", str, "")
        folder = root / rel if rel else root
        folders.append(folder)
        routers = [(folder, 1)]
        while routers:  # nested Routers' keys too, as deep as check_model_folder allows
            router, depth = routers.pop()
            found = router_config(router) if router.is_dir() and depth <= MAX_ROUTER_DEPTH else None
            if found is not None:
                file, cfg = found
                keys = [router / key for key in Fields(cfg, file).get("types", dict, {})]
                folders += keys
                routers += [(key, depth + 1) for key in keys]
    return list(dict.fromkeys(folders))


def _check_sbert_config(file: Path) -> None:
    f = Fields(read_json(file), file)
    if "model_name_or_path" in f:
        raise f.error(
            "model_name_or_path",
            "is set by the loader itself (the folder is the model); remove this key from the file",
        )
    for key in _KWARGS:
        f.get(key, (dict, type(None)), None)
    backbone = file.parent / "config.json"
    limit = position_limit(read_json(backbone)) if backbone.is_file() else None
    f.get("max_seq_length", (int, type(None)), None, lo=1, check=lambda v: check_max_seq_length(v, limit))
    f.get("do_lower_case", bool, False)


def _check_st_config(file: Path) -> None:
    f = Fields(read_json(file), file)
    f.get("similarity_fn_name", (str, type(None)), None, choices=(*_SIMILARITY_FN_NAMES, None))
    prompts = f.get("prompts", (dict, type(None)), None) or {}
    for name, prompt in prompts.items():
        if not isinstance(prompt, str):
            raise f.error(f"prompts.{name}", f"must be a string, got {prompt!r}")
    f.get("default_prompt_name", (str, type(None)), None)


def _check_backbone_config(file: Path) -> int | None:
    """The keys of a transformers ``config.json`` the package reads, checked; its ``max_position_embeddings`` (``None``
    when missing)."""
    f = Fields(read_json(file), file)
    model_type = f.get("model_type", str, None)
    if model_type in PADDING_OFFSET_TYPES:
        f.get("pad_token_id", (int, type(None)), None)
    return f.get("max_position_embeddings", int, None, lo=1)


def _check_positions(file: Path, positions: int | None, shapes: dict[Path, dict[str, list[int]]]) -> None:
    """``max_position_embeddings`` of ``file`` (a ``config.json``) against the absolute position table of the weights
    beside it, where there is exactly one size of it."""
    tables = [
        (weights, name, shape[0])
        for weights, tensors in shapes.items()
        for name, shape in tensors.items()
        if (name == POSITION_TABLE or name.endswith("." + POSITION_TABLE)) and len(shape) == 2
    ]
    if len({rows for _, _, rows in tables}) != 1:  # none (rotary / relative positions, a pickle), or several sizes
        return
    weights, name, rows = tables[0]
    if rows < 1:
        raise InputFileError(weights, f"key {name!r}: is a position table of 0 rows: no text fits the backbone")
    table = f"{weights.name} holds the position table {name!r} of {rows} rows"
    f = Fields({}, file)
    if positions is None:
        raise f.error(
            "max_position_embeddings",
            f'is missing, but {table}; add "max_position_embeddings": {rows} (transformers would take the '
            "architecture's default, which need not match the weights)",
        )
    if positions != rows:
        raise f.error("max_position_embeddings", f"is {positions}, but {table}; allowed: {rows}")


def check_model_files(root: str | os.PathLike) -> None:
    """Read every config file and safetensors header of the local model folder ``root`` (module docstring); raise
    :class:`~st_magnitude._trust.InputFileError` naming the first broken one. A hub id (no folder) is left alone."""
    root = Path(root)
    if not root.is_dir():
        return
    for folder in _module_folders(root):
        if not folder.is_dir():
            continue
        backbone: tuple[Path, int | None] | None = None
        for name in CONFIG_FILES:
            file = folder / name
            if not file.is_file():
                continue
            if name == "sentence_bert_config.json":
                _check_sbert_config(file)
            elif name == "config_sentence_transformers.json":
                _check_st_config(file)
            elif name == "config.json":
                backbone = file, _check_backbone_config(file)
            else:
                Fields(read_json(file), file)
        shapes = {weights: check_safetensors(weights) for weights in sorted(folder.glob("*.safetensors"))}
        if backbone is not None:
            _check_positions(*backbone, shapes)
