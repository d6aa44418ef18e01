"""What ``strip`` changes in a saved model folder, decided and checked before anything is written or deleted.

:func:`plan_strip` reads the folder layout (``modules.json``, :func:`~st_magnitude.model._layout.read_folder_layout`),
every ``Router`` config and ``config_sentence_transformers.json`` through the trust boundary (each error names the
file and the key) and decides which trailing ``Normalize`` entries go, which route-end ``Normalize`` keys leave each
Router, and which folders are deleted with them. A folder is deleted only when it lies strictly inside the model
folder and no other entry uses it: not the model folder itself (a ``path`` of ``.`` or ``./`` would delete the whole
model), not a folder another ``modules.json`` entry or Router key names (a dropped ``Normalize`` whose ``path`` is
``1_Pooling`` would delete the kept Pooling), not a folder holding one nor one inside one. Anything else is refused
with an :class:`~st_magnitude._trust.InputFileError` before a byte is written. :func:`apply_strip_plan` then makes
the planned edit on a copy (the staging folder).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from st_magnitude._trust import Fields, InputFileError, contained, read_json, router_config, write_json_atomic
from st_magnitude.model._layout import kind_of_type, read_folder_layout

__all__ = ["StripPlan", "apply_strip_plan", "plan_strip"]


@dataclass
class StripPlan:
    """The edit: ``modules`` (the kept entries), each Router config to rewrite (relative file → content), the
    folders to delete (relative to the model folder), and the counts of removed / kept inner ``Normalize``."""

    modules: list[dict[str, Any]]
    router_configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    delete: list[str] = field(default_factory=list)
    st_config: dict[str, Any] = field(default_factory=dict)
    removed: int = 0
    inner: int = 0


@dataclass
class _Use:
    folder: Path  # resolved
    what: str
    owner: str | None = None  # a Router's folder owns its keys' folders (they lie inside it by design)


def _router(root: Path, folder: Path, at_end: bool) -> tuple[Path, dict[str, Any], list[str], int, int] | None:
    """``(config file, new config, keys to delete, removed, inner)`` of the Router saved in ``folder``."""
    found = router_config(folder)
    if found is None:
        return None
    file, cfg = found
    f = Fields(cfg, file)
    types = f.get("types", dict, {})
    structure = f.get("structure", dict, {})
    for key, type_str in types.items():
        if not isinstance(type_str, str):
            raise f.error(f"types.{key}", f"must be a string (a module class path), got {type_str!r}")
    removed = inner = 0
    new_structure: dict[str, list[str]] = {}
    for route, keys in structure.items():
        if not (isinstance(keys, list) and all(isinstance(k, str) and k in types for k in keys)):
            raise f.error(f"structure.{route}", f"must list keys of 'types' ({sorted(types)}), got {keys!r}")
        keys = list(keys)
        while at_end and keys and kind_of_type(types[keys[-1]]) == "normalize":
            keys.pop()
            removed += 1
        inner += sum(1 for k in keys if kind_of_type(types[k]) == "normalize")
        new_structure[route] = keys
    used = {k for keys in new_structure.values() for k in keys}
    gone = [k for k, t in types.items() if kind_of_type(t) == "normalize" and k not in used]
    new_cfg = {**cfg, "types": {k: t for k, t in types.items() if k not in gone}, "structure": new_structure}
    return file, new_cfg, gone, removed, inner


def _inside(folder: Path, other: Path) -> bool:
    return other in folder.parents


def _check_deletion(root: Path, base: Path, file: Path, where: str, target: _Use, uses: list[_Use]) -> None:
    folder = target.folder
    if folder == base or not _inside(folder, base):
        raise InputFileError(
            file,
            f"{where} names the model folder itself as a dropped Normalize's folder; deleting it would delete the "
            "whole model. A module's path is its own sub-folder (e.g. '2_Normalize'): fix that entry.",
        )
    for use in uses:
        if use is target:
            continue
        clash = (
            "is"
            if folder == use.folder
            else "holds"
            if _inside(use.folder, folder)
            else "lies inside"
            if use.folder != base and use.folder != target.owner and _inside(folder, use.folder)
            else None
        )
        if clash:
            rel = use.folder.relative_to(base).as_posix() or "."
            raise InputFileError(
                file,
                f"{where}: the dropped Normalize's folder {clash} the folder {rel!r} of {use.what}; deleting it would "
                "break the kept model. Each module needs a folder of its own: fix that entry.",
            )


def plan_strip(root: Path) -> StripPlan:
    """The strip edit of the saved model folder ``root``, checked (module docstring); reads, never writes."""
    root = Path(root)
    base = root.resolve()
    modules_file, layout = read_folder_layout(root)
    entries, kinds = layout.modules, layout.kinds
    n_kept = len(entries)
    while n_kept and kinds[n_kept - 1] == "normalize":
        n_kept -= 1
    plan = StripPlan(modules=[e.obj for e in entries[:n_kept]])
    plan.removed = len(entries) - n_kept
    plan.inner = sum(1 for k in kinds[:n_kept] if k == "normalize")

    uses: list[_Use] = []
    doomed: list[tuple[_Use, Path, str]] = []
    for i, entry in enumerate(entries):
        rel = entry.get("path", str, "")
        use = _Use(contained(root, rel, f"modules.json entry {i} path").resolve(), f"modules.json entry {i}")
        uses.append(use)
        if i >= n_kept and rel:
            doomed.append((use, modules_file, f"entry {i} key 'path' ({rel!r})"))
        if i < n_kept and kinds[i] == "router":
            folder = root / rel if rel else root
            router = _router(root, folder, at_end=i == n_kept - 1)
            if router is None:
                continue
            file, cfg, gone, removed, inner = router
            plan.removed += removed
            plan.inner += inner
            shown = file.relative_to(root).as_posix()
            for key in cfg["types"]:
                uses.append(_Use((folder / key).resolve(), f"{shown} key {key!r}", owner=use.folder))
            for key in gone:
                key_use = _Use((folder / key).resolve(), f"{shown} key {key!r}", owner=use.folder)
                uses.append(key_use)
                doomed.append((key_use, file, f"types key {key!r}"))
            if removed or gone:
                plan.router_configs[shown] = cfg
    for use, file, where in doomed:
        _check_deletion(root, base, file, where, use, uses)
        if use.folder.is_dir():
            plan.delete.append(use.folder.relative_to(base).as_posix())

    st_file = root / "config_sentence_transformers.json"
    plan.st_config = Fields(read_json(st_file), st_file).obj if st_file.is_file() else {}
    return plan


def apply_strip_plan(plan: StripPlan, stage: Path, similarity_fn_name: str) -> None:
    """Make ``plan`` on ``stage`` (a copy of the planned folder)."""
    write_json_atomic(stage / "modules.json", plan.modules)
    for rel, cfg in plan.router_configs.items():
        write_json_atomic(stage / rel, cfg)
    for rel in dict.fromkeys(plan.delete):
        folder = stage / rel
        if folder.is_dir() and not folder.is_symlink():
            shutil.rmtree(folder)
        elif folder.is_symlink():
            folder.unlink()
    write_json_atomic(
        stage / "config_sentence_transformers.json", {**plan.st_config, "similarity_fn_name": similarity_fn_name}
    )
