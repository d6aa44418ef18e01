"""Merging the seeds of one claim run in parts (one process per seed, or several machines) into one result.

Each seed seeds its own RNGs (``set_seed``), so seed ``k`` run alone (``--first-seed k --seeds 1``) gives the same
record as seed ``k`` inside an uninterrupted run; the parts can therefore run at once and be merged afterwards. A
merge refuses parts that differ in anything that changes the numbers (:func:`~.resume.run_differences`: settings,
model, precision, a dry run, the device, the GPU or torch version) or that hold the same seed twice, and names
what differs. The merged record keeps every part's file, seeds, command and recorded cost under ``merged_from``; its
cost is the parts' CPU-seconds summed and the wall time during which at least one part ran (parts at once count
once; hours between parts in turn do not count).
"""

from __future__ import annotations

import os
import shlex
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from st_magnitude._trust import InputFileError
from st_magnitude._trust.outputs import check_output_dir
from st_magnitude._trust.write import write_json_atomic
from st_magnitude.lab.engine.machine import COST_KEYS
from st_magnitude.lab.replication.items import write_items
from st_magnitude.lab.replication.resume import run_differences
from st_magnitude.lab.replication.run_file import RULE_INPUT_ERRORS, read_run, refuse_unreadable_decision
from st_magnitude.lab.replication.runner import (
    check_replace,
    decide_again,
    public_command,
    run_name,
    summary,
)

__all__ = ["merge_runs"]

#: what a merged record does not take over from its first part (replaced, or true of that part alone)
_PART_ONLY = (
    "decision", "verdict", "full_result", "summary_result", "resumed_utc", "resources_before_resume",
    "resources_process", "redecided_utc",
)  # fmt: skip


def merge_runs(
    full_results: list[str | os.PathLike],
    out: str | os.PathLike,
    results: str | os.PathLike | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Merge the full-result files ``full_results`` (parts of one run, disjoint seeds) into one result in ``out``,
    decided by the claim's own rule; with ``results``, also its summary (refused over a summary with more seeds
    unless ``force``). Returns the merged record."""
    if len(full_results) < 2:
        raise ValueError(f"--merge needs at least two full-result files, got {len(full_results)}")
    check_output_dir(out, "--output")  # a read-only folder is found before anything is read
    if results is not None:
        check_output_dir(results, "--results")
    parts = [(Path(p), read_run(p, seeds_required=True)) for p in full_results]  # names, types, known keys only
    parts.sort(key=lambda pr: min(s["seed"] for s in pr[1]["seeds"]))
    first_path, first = parts[0]
    for path, rec in parts[1:]:
        differ = run_differences(rec, first)
        if differ:
            problem = f"this part and {first_path} differ in {', '.join(differ)}: they are not parts of one run"
            raise InputFileError(path, problem)
    seeds = [s for _, rec in parts for s in rec["seeds"]]
    numbers = [s["seed"] for s in seeds]
    twice = sorted({n for n in numbers if numbers.count(n) > 1})
    if twice:
        path = next(p for p, rec in parts[1:] if any(s["seed"] in twice for s in rec["seeds"]))
        raise InputFileError(path, f"seed(s) {twice} appear in more than one part; pass each seed once")
    seeds.sort(key=lambda s: s["seed"])

    record = {k: v for k, v in first.items() if k not in _PART_ONLY}
    record["seeds"] = seeds
    record["command"] = _merged_command([rec for _, rec in parts], sorted(numbers))
    record["merged_from"] = [
        {
            "file": path.name,
            "seeds": [s["seed"] for s in rec["seeds"]],
            "command": public_command(rec.get("command", "")),
            "started_utc": rec.get("started_utc"),
            "finished_utc": rec.get("finished_utc"),
            "resources": dict(rec.get("resources") or {}),  # a resumed part's includes its killed processes
        }
        for path, rec in parts
    ]
    record["resources"] = _merged_resources(record["merged_from"])
    record["wall_seconds"] = record["resources"]["wall_seconds"]
    starts = [m["started_utc"] for m in record["merged_from"] if m["started_utc"]]
    record["started_utc"] = min(starts) if starts else None
    ends = [m["finished_utc"] for m in record["merged_from"] if m["finished_utc"]]
    record["finished_utc"] = max(ends) if ends else None
    record["merged_utc"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    shape = sorted(first["seeds"][0])
    for path, rec in parts:
        for i, s in enumerate(rec["seeds"]):
            if sorted(s) != shape:
                raise InputFileError(
                    path, f"key 'seeds[{i}]' holds the keys {sorted(s)}, the first part's seeds {shape}: the seed "
                    "records hold different keys, so these are not parts of one run",
                )  # fmt: skip
    try:
        decide_again(record)
    except InputFileError:
        raise
    except RULE_INPUT_ERRORS as exc:  # seed records the claim's rule cannot read
        raise refuse_unreadable_decision([p for p, _ in parts], record["claim"], exc) from exc

    name = run_name(record["claim"], record["profile"], record.get("tag"))
    if results is not None:
        check_replace(Path(results) / f"{name}.json", len(seeds), force, record)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    full_path = Path(out) / f"{name}-{stamp}-merged.json"
    write_json_atomic(full_path, record, indent=1)
    record["full_result"] = str(full_path)
    if results is not None:
        record["summary_result"] = str(Path(results) / f"{name}.json")
        write_json_atomic(Path(results) / f"{name}.json", summary(record), indent=1)
        write_items(record, Path(results) / f"{name}.json")
    return record


def _merged_resources(parts: list[dict[str, Any]]) -> dict[str, Any]:
    res = [m["resources"] for m in parts]
    out: dict[str, Any] = {
        k: (round(sum(r[k] for r in res), 2) if all(r.get(k) is not None for r in res) else None)
        for k in COST_KEYS
        if k != "wall_seconds"
    }
    spans = [(_time(m["started_utc"]), _end(m)) for m in parts]
    if all(a and b for a, b in spans):  # the time during which some part ran: parts may run at once or hours apart
        spans.sort()
        busy, (start, end) = 0.0, spans[0]
        for a, b in spans[1:]:
            if a > end:
                busy, start = busy + (end - start).total_seconds(), a
            end = max(end, b)
        out["wall_seconds"] = round(busy + (end - start).total_seconds(), 2)
    else:
        out["wall_seconds"] = round(sum(r.get("wall_seconds") or 0.0 for r in res), 2)
    out["load_average_start"] = res[0].get("load_average_start")
    out["load_average_end"] = res[-1].get("load_average_end")
    out["parts"] = len(parts)
    return out


def _end(part: dict[str, Any]) -> datetime | None:
    """When a part finished; for a run stopped before its last seed (no ``finished_utc``), its start plus its wall
    time."""
    end, start, wall = (
        _time(part.get("finished_utc")),
        _time(part.get("started_utc")),
        part["resources"].get("wall_seconds"),
    )
    if end is None and start is not None and wall is not None:
        try:
            end = start + timedelta(seconds=wall)
        except OverflowError:  # past the calendar's end: unknown
            end = None
    return end


def _time(stamp: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(stamp) if stamp else None
    except ValueError:
        return None


def _merged_command(recs: list[dict[str, Any]], seeds: list[int]) -> str:
    """The one command that reproduces the merged seeds (the first part's, with its seed range widened) when the
    seeds are consecutive; otherwise the parts' commands joined by ``;``."""
    commands = [public_command(r.get("command", "")) for r in recs]
    if seeds != list(range(seeds[0], seeds[0] + len(seeds))):
        return "; ".join(commands)
    try:
        words = shlex.split(commands[0])
    except ValueError:
        return "; ".join(commands)
    kept, skip = [], False
    for w in words:
        if skip:
            skip = False
        elif w in ("--seeds", "--first-seed"):
            skip = True
        elif not w.startswith(("--seeds=", "--first-seed=")):
            kept.append(w)
    kept += ["--seeds", str(len(seeds))] + (["--first-seed", str(seeds[0])] if seeds[0] else [])
    return shlex.join(kept)
