"""Every config file and weights header of a local model folder, read through the trust boundary before a loader.

sentence-transformers and transformers read these files themselves, and a broken one ends in a traceback from deep
inside them (``TypeError: got multiple values for keyword argument 'model_name_or_path'`` for a
``sentence_bert_config.json`` naming that key, ``SafetensorError: invalid header length`` for a truncated
``model.safetensors``, a ``JSONDecodeError`` without the file's name). :func:`check_model_files` reads each of them
first with :func:`read_json` / :class:`Fields` and :func:`check_safetensors`, so such a folder is one
:class:`InputFileError` naming the file and the line or key. It runs after
:func:`~st_magnitude._trust.paths.check_model_folder` (every path it follows stays inside the folder).
"""

from __future__ import annotations

import os
from pathlib import Path

from st_magnitude._trust.json_files import Fields, read_json
from st_magnitude._trust.paths import MAX_ROUTER_DEPTH, router_config
from st_magnitude._trust.positions import check_max_seq_length, position_limit
from st_magnitude._trust.weights import check_safetensors

__all__ = ["check_model_files"]

#: the JSON files sentence-transformers reads in a model folder or a module's folder
CONFIG_FILES = ("config_sentence_transformers.json", "sentence_bert_config.json", "config.json", "router_config.json")
#: keys of ``sentence_bert_config.json`` that sentence-transformers sets itself and that must be objects
_KWARGS = ("model_kwargs", "processor_kwargs", "config_kwargs", "model_args", "tokenizer_args", "config_args")
_SIMILARITY_FN_NAMES = ("cosine", "dot", "euclidean", "manhattan")


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


def check_model_files(root: str | os.PathLike) -> None:
    """Read every config file and safetensors header of the local model folder ``root`` (module docstring); raise
    :class:`~st_magnitude._trust.InputFileError` naming the first broken one. A hub id (no folder) is left alone."""
    root = Path(root)
    if not root.is_dir():
        return
    for folder in _module_folders(root):
        if not folder.is_dir():
            continue
        for name in CONFIG_FILES:
            file = folder / name
            if not file.is_file():
                continue
            if name == "sentence_bert_config.json":
                _check_sbert_config(file)
            elif name == "config_sentence_transformers.json":
                _check_st_config(file)
            else:
                Fields(read_json(file), file)
        for weights in sorted(folder.glob("*.safetensors")):
            check_safetensors(weights)
