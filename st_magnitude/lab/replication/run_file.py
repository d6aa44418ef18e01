"""Reading a run record from disk: a full result, a part to merge, a partial file to resume, a committed summary.

Such a file may come from another machine or be edited by hand, and its ``claim``, ``profile`` and ``tag`` become
parts of the file names the runner writes. :func:`read_run` reads it through the trust boundary
(:mod:`st_magnitude._trust`): every name is a safe file-name part (:func:`~st_magnitude._trust.check_name`'s rule,
the one ``--tag`` follows), every value the runner, the merge and the report use has its type and range, and only
the keys a run record has are kept (an extra key is never copied into a merged result or a committed summary). A
seed record's own content is the claim's (its rule reads it); here it must be an object with a ``seed`` number.
``NaN`` is refused as everywhere; ``Infinity`` is read, because a decision over one seed (a part) holds an
undefined interval with infinite ends (:func:`st_magnitude.evaluation.stats.seed_interval`).
Every refusal is an :class:`~st_magnitude._trust.InputFileError` naming the file and the key.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Any

from st_magnitude._trust import Fields, InputFileError, read_json
from st_magnitude.lab.engine.machine import COST_KEYS
from st_magnitude.lab.replication.claim import PROFILES
from st_magnitude.lab.replication.claims import CLAIM_MODULES

__all__ = ["RULE_INPUT_ERRORS", "RUN_KEYS", "read_run", "refuse_unreadable_decision"]

_STR = (str,)
_OPT_STR = (str, type(None))
#: the keys of a run record: what the runner, a resume, a merge and ``--redecide`` write (anything else is dropped)
RUN_KEYS = frozenset(
    {
        "claim", "paper", "title", "statement", "paper_number", "verdict_rule", "verdict_rule_when_run", "profile",
        "tag", "dry_run", "settings", "model_override", "setting_differences", "can_establish", "command", "machine",
        "bf16", "started_utc", "finished_utc", "resumed_utc", "merged_utc", "redecided_utc", "seeds", "status",
        "resources", "resources_process", "resources_before_resume", "wall_seconds", "decision", "verdict",
        "merged_from", "full_result",
    }
)  # fmt: skip
_TEXT_KEYS = ("paper", "title", "statement", "paper_number", "verdict_rule", "can_establish", "command", "verdict")
_STAMP_KEYS = ("started_utc", "finished_utc", "merged_utc", "redecided_utc")
_RESOURCE_KEYS = frozenset({*COST_KEYS, "load_average_start", "load_average_end", "processes", "parts"})
_MACHINE_KEYS = frozenset(
    {"host", "platform", "python", "torch", "cpu_count", "torch_threads", "device", "gpu", "sentence_transformers",
     "transformers"}
)  # fmt: skip
_MERGED_KEYS = frozenset({"file", "seeds", "command", "started_utc", "finished_utc", "resources"})


def read_run(path: str | os.PathLike, *, seeds_required: bool = False) -> dict[str, Any]:
    """The run record in ``path``, checked as the module docstring says, with only :data:`RUN_KEYS`;
    ``seeds_required``: it must hold at least one seed (a part to merge, a result to decide again)."""
    path = Path(path)
    # a decision over one seed holds an undefined interval (±Infinity); NaN is refused
    f = Fields(read_json(path, allow_infinity=True), path, what="a run record")
    rec = f.known(RUN_KEYS)
    claim = f.name("claim")
    if claim not in CLAIM_MODULES:
        raise f.error("claim", f"must be one of {sorted(CLAIM_MODULES)}, got {claim!r}")
    f.get("profile", str, choices=PROFILES)
    f.name("tag", default=None)
    f.get("status", str, "finished", choices=("running", "finished"))
    f.get("settings", dict)
    for key in ("dry_run", "bf16"):
        f.get(key, bool, False)
    f.get("model_override", _OPT_STR, None)
    for key in _TEXT_KEYS:
        f.get(key, _STR, "")
    f.get("verdict_rule_when_run", _OPT_STR, None)
    f.get("full_result", _OPT_STR, None)
    f.get("decision", dict, {})
    f.get("setting_differences", list, [], check=_strings)
    f.get("resumed_utc", list, [], check=lambda v: _strings(v) or next(filter(None, map(_stamp, v)), None))
    for key in _STAMP_KEYS:
        f.get(key, _OPT_STR, None, check=_stamp)
    f.get("wall_seconds", (float, type(None)), None, lo=0, hi=MAX_SECONDS)
    if "machine" in f:
        machine = f.sub("machine")
        for key in _MACHINE_KEYS & set(machine.keys()):
            machine.get(key, (str, int, type(None)))
        rec["machine"] = machine.known(_MACHINE_KEYS)
    for key in ("resources", "resources_process"):
        if key in f:
            rec[key] = _resources(f.sub(key))
    if "resources_before_resume" in f:
        before = f.get("resources_before_resume", list)
        rec["resources_before_resume"] = [
            None if r is None else _resources(_item(f, "resources_before_resume", i, r)) for i, r in enumerate(before)
        ]
    if "merged_from" in f:
        rec["merged_from"] = [_merged(_item(f, "merged_from", i, m)) for i, m in enumerate(f.get("merged_from", list))]
    rec["seeds"] = _seeds(f, seeds_required)
    return rec


def _item(f: Fields, key: str, i: int, value: object) -> Fields:
    return Fields(value, f.file, f.where, what=f"key '{key}[{i}]'", prefix=f"{key}[{i}].")


def _strings(value: list) -> str | None:
    return None if all(isinstance(v, str) for v in value) else "must be a list of strings"


def _stamp(value: object) -> str | None:
    """A problem when ``value`` is not an ISO 8601 time with its UTC offset (``2026-01-01T10:00:00+00:00``)."""
    if value is None:
        return None
    try:
        aware = datetime.fromisoformat(value).tzinfo is not None
    except (TypeError, ValueError):
        aware = False
    example = "2026-01-01T10:00:00+00:00"
    return None if aware else f"must be an ISO 8601 time with its UTC offset ({example}), got {value!r}"


#: the most seconds a recorded cost may hold (about 30 years): beyond, a time plus it leaves the calendar
MAX_SECONDS = 1e9


def _resources(f: Fields) -> dict[str, Any]:
    for key in COST_KEYS:
        f.get(key, (float, type(None)), None, lo=0, hi=MAX_SECONDS)
    for key in ("load_average_start", "load_average_end"):
        f.get(key, (list, type(None)), None, check=_numbers)
    for key in ("processes", "parts"):
        f.get(key, int, 1, lo=1)
    return f.known(_RESOURCE_KEYS)


def _numbers(value: list) -> str | None:
    ok = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    return None if ok else "must be a list of numbers"


def _merged(f: Fields) -> dict[str, Any]:
    f.get("file", str)
    f.get("seeds", list, check=_seed_numbers)
    f.get("command", str, "")
    for key in ("started_utc", "finished_utc"):
        f.get(key, _OPT_STR, None, check=_stamp)
    out = f.known(_MERGED_KEYS)
    out["resources"] = _resources(f.sub("resources")) if "resources" in f else {}
    return out


def _seed_numbers(value: list) -> str | None:
    ok = all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
    return None if ok else "must be a list of seed numbers (integers ≥ 0)"


def _seeds(f: Fields, required: bool) -> list[dict[str, Any]]:
    seeds = f.get("seeds", list, [])
    if required and not seeds:
        raise f.error("seeds", "holds no finished seed")
    out, numbers = [], set()
    for i, value in enumerate(seeds):
        s = _item(f, "seeds", i, value)
        number = s.get("seed", int, lo=0)
        if number in numbers:
            raise s.error("seed", f"seed {number} appears twice in this file")
        numbers.add(number)
        s.get("wall_seconds", (float, type(None)), None, lo=0, hi=MAX_SECONDS)
        seed = dict(s.obj)
        if "resources" in s:
            seed["resources"] = _resources(s.sub("resources"))
        out.append(seed)
    return out


#: what a claim's rule raises on seed records it cannot read (deciding parts or a result read from disk)
RULE_INPUT_ERRORS = (KeyError, TypeError, IndexError, AttributeError, ValueError, ArithmeticError)


def refuse_unreadable_decision(files: list[Path], claim: str, exc: Exception) -> InputFileError:
    """The error for seed records the claim's rule cannot read (a key missing, a value of another type or out of its
    range): names the files they came from."""
    names = ", ".join(str(p) for p in files)
    return InputFileError(
        names,
        f"its seed records do not hold what claim {claim}'s rule reads ({type(exc).__name__}: {exc}); "
        "pass the full-result files a run of this claim wrote",
    )
