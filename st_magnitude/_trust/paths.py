"""Paths a model folder names must stay inside that folder.

A saved SentenceTransformer folder names sub-folders in its own files: each ``modules.json`` entry's ``path``, a
``Router``'s ``types`` keys (one sub-folder per module) and the ``structure`` routes that list them. A hostile or
corrupted folder can name ``../victim``, ``/etc`` or a symlink that points outside; code that reads, writes or deletes
those folders (``strip`` removes the folders of dropped modules) would then act outside the model.
:func:`check_model_folder` resolves every such path (symlinks included) and raises :class:`UnsafeModelPathError`
before anything is read, written or deleted. The one symlink that may lead outside is a file of a Hugging Face
cache snapshot (``<repo>/snapshots/<revision>``) pointing into its repository's ``blobs`` folder. Routers nested in
a Router's keys are checked the same way, at most :data:`MAX_ROUTER_DEPTH` levels deep and each reached once (a key
linked back to an enclosing Router would nest without end). Standard library only.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from st_magnitude._trust.errors import InputFileError
from st_magnitude._trust.json_files import read_json

__all__ = ["UnsafeModelPathError", "check_model_folder", "contained", "router_config"]


class UnsafeModelPathError(InputFileError):
    """A path named by a model folder (or a symlink in it) leads outside that folder."""


def _refuse(root: Path, what: str, value: object) -> UnsafeModelPathError:
    return UnsafeModelPathError(
        root,
        f"{what} {value!r} leads outside the model folder; refusing to read, write or delete it. "
        "A saved model names only relative sub-folders inside itself: fix or remove that entry.",
    )


def _resolve(root: Path, path: Path) -> Path:
    """``path.resolve()``, with a symlink loop as an :class:`UnsafeModelPathError` naming it (not a traceback)."""
    try:
        return path.resolve()
    except (RuntimeError, OSError) as exc:  # Python < 3.13: RuntimeError("Symlink loop"); later: OSError(ELOOP)
        rel = path.relative_to(root).as_posix() if root in path.parents else str(path)
        raise UnsafeModelPathError(root, f"the path {rel!r} is a symlink loop ({exc}); remove that link") from None


def contained(root: str | os.PathLike, rel: object, what: str) -> Path:
    """``root / rel`` after checking that ``rel`` is a relative path that resolves (symlinks followed) inside
    ``root``; raises :class:`UnsafeModelPathError` naming ``what`` otherwise. ``""`` is ``root`` itself."""
    root = Path(root)
    if not isinstance(rel, str):
        raise _refuse(root, what, rel) if rel is not None else UnsafeModelPathError(root, f"{what} is missing")
    if "\x00" in rel or PurePosixPath(rel).is_absolute() or PureWindowsPath(rel).is_absolute() or ":" in rel[:2]:
        raise _refuse(root, what, rel)
    base = _resolve(root, root)
    target = _resolve(root, root / rel)
    if target != base and base not in target.parents:
        raise _refuse(root, what, rel)
    return root / rel if rel else root


def router_config(folder: Path) -> tuple[Path, dict[str, Any]] | None:
    """The config file of a saved ``Router`` in ``folder`` (``router_config.json``, else ST's older ``config.json``
    with ``types``) and its content, or ``None`` when there is none."""
    for name in ("router_config.json", "config.json"):
        file = folder / name
        if file.is_file():
            cfg = read_json(file)
            if isinstance(cfg, dict) and (name == "router_config.json" or "types" in cfg):
                return file, cfg
    return None


#: how deep Routers may nest (a Router whose route holds a Router is 2 levels): loading grows with every level (12
#: levels took 8 s in ``inspect``, 40 ran past 200 s); the package's own models use 1.
MAX_ROUTER_DEPTH = 4


def _check_router(root: Path, folder: Path, where: str, depth: int = 1, seen: set[Path] | None = None) -> None:
    found = router_config(folder)
    if found is None:
        return
    file, cfg = found
    rel = file.relative_to(root).as_posix()
    if depth > MAX_ROUTER_DEPTH:
        raise InputFileError(
            file,
            f"is a Router nested {depth} levels deep ({where}); at most {MAX_ROUTER_DEPTH} levels are read (the "
            "loading time grows with every level): flatten the model",
        )
    seen = set() if seen is None else seen
    real = _resolve(root, folder)
    if real in seen:
        raise InputFileError(file, f"is a Router reached twice ({where}): a key leads back to an enclosing Router")
    seen.add(real)
    types = cfg.get("types") or {}
    structure = cfg.get("structure") or {}
    if not isinstance(types, dict) or not isinstance(structure, dict):
        raise InputFileError(file, f"must map 'types' and 'structure' to objects ({where})")
    for key in types:
        if not isinstance(key, str) or key in ("", ".", "..") or Path(key).name != key:
            raise _refuse(root, f"{rel} types key", key)
        contained(root, (folder / key).relative_to(root).as_posix(), f"{rel} types key")
    for route, keys in structure.items():
        if not isinstance(keys, list) or any(key not in types for key in keys):
            raise InputFileError(
                file, f"route {route!r} must list keys of its 'types' ({sorted(types)}), got {keys!r}"
            )
    for key in types:
        if (folder / key).is_dir():
            _check_router(root, folder / key, f"{where} > {rel} types key {key!r}", depth + 1, seen)


def check_model_folder(root: str | os.PathLike) -> None:
    """Raise :class:`UnsafeModelPathError` when anything ``root`` names leads outside it: a ``modules.json`` path,
    a Router's ``types`` key or route entry, or a symlink anywhere in the folder. A folder without ``modules.json``
    is checked for symlinks only. Reads only the folder's JSON files."""
    root = Path(root)
    if not root.is_dir():
        return
    base = _resolve(root, root)
    # a Hugging Face cache snapshot (<repo>/snapshots/<revision>) links its files to <repo>/blobs: those may stay
    blobs = base.parent.parent / "blobs" if base.parent.name == "snapshots" else None
    for dirpath, dirnames, filenames in os.walk(root):  # does not descend into symlinked folders
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            if path.is_symlink():
                target = _resolve(root, path)
                if target == base or base in target.parents:
                    continue
                if blobs is not None and target.parent == blobs and target.is_file():
                    continue
                raise _refuse(root, "the symlink", path.relative_to(root).as_posix())
    modules_file = root / "modules.json"
    if not modules_file.is_file():
        return
    entries = read_json(modules_file)
    if not isinstance(entries, list):
        raise InputFileError(modules_file, f"expected a list of module entries, got {type(entries).__name__}")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise InputFileError(modules_file, f"entry {i} is not an object: {entry!r}")
        sub = contained(root, entry.get("path", ""), f"modules.json entry {i} path")
        if str(entry.get("type", "")).endswith(".Router") and sub.is_dir():
            _check_router(root, sub, f"modules.json entry {i}")
