"""The per-item values of a committed result: ``<summary name>.items.json.gz`` beside its summary.

A summary (``docs/replication/results/<name>.json``) drops the per-item arrays (per-query scores, STS predictions
and labels, pooled-AUC pools, dev histories) to stay small; this file holds exactly those, per seed and arm, so anyone
can put the two back together (:func:`with_items`) and recompute every interval with the claim's own ``decide``
(:func:`recompute`). Written by the runner, ``--merge`` and ``--redecide`` beside every summary they write, from a
record that has the per-item values.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

from st_magnitude._trust.errors import InputFileError
from st_magnitude._trust.gzip_json import read_json_gz, write_json_gz_atomic
from st_magnitude.lab.replication.common import pooled_auc_statistic
from st_magnitude.lab.replication.item_values import check_item_values
from st_magnitude.lab.replication.pool_sizes import check_pool_sizes

__all__ = [
    "FORMAT",
    "PER_ITEM_KEYS",
    "items_path",
    "recompute",
    "read_items",
    "split_items",
    "with_items",
    "write_items",
]

FORMAT = "st-magnitude per-item values 1"
SUFFIX = ".items.json.gz"
#: the keys of a record that hold per-item arrays: dropped from the summary, kept in this file
PER_ITEM_KEYS = ("per_query", "auc_pools", "predictions", "labels", "history")


def items_path(summary_path: str | os.PathLike) -> Path:
    """``<folder>/<name>.items.json.gz`` for the summary ``<folder>/<name>.json``."""
    p = Path(summary_path)
    return p.with_name(p.name.removesuffix(".json") + SUFFIX)


def _only_bulky(obj: Any, keys: tuple[str, ...]) -> Any:
    """The parts of ``obj`` under a key in ``keys`` (with the dict path to them); None where there are none."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k in keys:
                out[k] = v
            else:
                sub = _only_bulky(v, keys)
                if sub is not None:
                    out[k] = sub
        return out or None
    return None


def split_items(record: dict[str, Any]) -> list[dict[str, Any]]:
    """Per seed: ``{"seed": n, ...}`` with only the per-item arrays of that seed's record, at their paths."""
    keys = PER_ITEM_KEYS
    return [{"seed": s["seed"], **(_only_bulky(s, keys) or {})} for s in record.get("seeds", [])]


def write_items(record: dict[str, Any], summary_path: str | os.PathLike) -> Path | None:
    """Write the per-item values of ``record`` beside its summary; None (nothing written) for a record without any
    (a summary judged again)."""
    seeds = split_items(record)
    if not any(set(s) - {"seed"} for s in seeds):
        return None
    path = items_path(summary_path)
    doc = {"format": FORMAT, "claim": record["claim"], "profile": record["profile"], "tag": record.get("tag")}
    write_json_gz_atomic(path, {**doc, "seeds": seeds})
    return path


def read_items(path: str | os.PathLike) -> dict[str, Any]:
    """A per-item values file, checked at the boundary (:func:`~st_magnitude._trust.gzip_json.read_json_gz`) and for
    its format, its seeds and every value (:func:`~st_magnitude.lab.replication.item_values.check_item_values`)."""
    doc = read_json_gz(path)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise InputFileError(path, f"is not a per-item values file (format must be {FORMAT!r})")
    seeds = doc.get("seeds")
    if not isinstance(seeds, list) or not all(isinstance(s, dict) and isinstance(s.get("seed"), int) for s in seeds):
        raise InputFileError(path, "'seeds' must be a list of objects with an integer 'seed'")
    for seed in seeds:
        try:
            check_item_values({k: v for k, v in seed.items() if k != "seed"})
        except ValueError as exc:
            raise InputFileError(path, f"seed {seed['seed']}.{exc}") from None
        for where, pools in _pools_in(seed, ""):
            try:
                pooled_auc_statistic(pools)
            except (ValueError, TypeError, AttributeError) as exc:
                raise InputFileError(path, f"seed {seed['seed']}{where}: {exc}") from None
    return doc


def _pools_in(obj: Any, where: str):
    """``(path, pools)`` for every ``auc_pools`` value under ``obj``."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "auc_pools":
                yield where, v if isinstance(v, dict) else {"format": None}
            else:
                yield from _pools_in(v, f"{where}.{k}")


def _merge(into: dict[str, Any], extra: dict[str, Any], where: str) -> None:
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v, f"{where}.{k}")
        elif k in into and k != "seed":
            raise ValueError(f"per-item values at {where}.{k} would replace the summary's own value")
        else:
            into[k] = v


def with_items(summary: dict[str, Any], items: dict[str, Any]) -> dict[str, Any]:
    """The full record: ``summary`` with the per-item arrays of ``items`` put back (a copy). Refuses items of
    another claim, profile, tag or set of seeds."""
    for key in ("claim", "profile", "tag"):
        if items.get(key) != summary.get(key):
            raise ValueError(f"per-item values are for {key} {items.get(key)!r}, the summary for {summary.get(key)!r}")
    have = [s["seed"] for s in summary["seeds"]]
    got = [s["seed"] for s in items["seeds"]]
    if have != got:
        raise ValueError(f"per-item values hold seeds {got}, the summary seeds {have}")
    full = copy.deepcopy(summary)
    for seed, extra in zip(full["seeds"], items["seeds"]):
        _merge(seed, extra, f"seed {seed['seed']}")
    return full


def recompute(summary_path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(summary, decision)``: the committed summary and its decision recomputed by the claim's ``decide`` from the
    summary and its per-item values file."""
    from st_magnitude._trust.json_files import read_json
    from st_magnitude.lab.replication.claims import get_claim

    summary = read_json(summary_path)
    full = with_items(summary, read_items(items_path(summary_path)))
    try:
        check_pool_sizes(full["seeds"], (full.get("settings") or {}).get("auc_negatives"))
    except ValueError as exc:
        raise InputFileError(items_path(summary_path), str(exc)) from None
    claim = get_claim(full["claim"])
    return summary, claim.decide(full["seeds"], full["settings"])
