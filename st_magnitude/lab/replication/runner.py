"""Run one claim for N seeds and write its result JSON.

Two files per run:

- ``OUT/<claim>-<profile>-<UTC time>.json`` — everything, including per-seed per-arm per-query scores (and pooled
  AUC pools) so every interval can be recomputed; the partial file is rewritten after every seed, and a killed run is
  continued from it by the next run of the same configuration (:mod:`st_magnitude.lab.replication.resume`).
- ``RESULTS/<claim>-<profile>.json``, only when ``results`` is given — the same without the per-item arrays (small;
  ``docs/replication.md`` is generated from these by ``st-magnitude replicate --report docs/replication.md``). A
  summary that holds more seeds than the new run is not replaced unless ``force``; replacing one made under other
  settings, device or torch logs a warning naming what differs.

A run holds ``OUT/.<claim>-<profile>[-<tag>]-seed<k>.lock`` for each of its seeds (:func:`seed_locks`): the same
command started twice refuses, while parts with other seeds run beside it; each new run writes a file of its own,
also when parts start in the same second. ``--output`` and ``--results`` are checked writable before any work.

Every run records what it cost, measured, not estimated: CPU-seconds of this process and of its finished children
(``resource.getrusage``), wall time, and the load average at start and end (``os.getloadavg``), per seed and in
total (``record["resources"]``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shlex
import sys
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from st_magnitude._trust import InputFileError, check_name
from st_magnitude._trust.outputs import check_output_dir, check_output_file
from st_magnitude._trust.write import write_json_atomic
from st_magnitude._warnings import AsymmetricSimilarityWarning, MagnitudeCollapseWarning
from st_magnitude.data.home import resolve_data_dir
from st_magnitude.lab.engine.lock import OutputLock
from st_magnitude.lab.engine.machine import Meter, machine_info, with_earlier_processes
from st_magnitude.lab.engine.models import check_model_arg
from st_magnitude.lab.engine.seeds import resolve_device, set_seed
from st_magnitude.lab.replication.claim import Claim
from st_magnitude.lab.replication.claims import get_claim
from st_magnitude.lab.replication.common import Context
from st_magnitude.lab.replication.items import PER_ITEM_KEYS, items_path, read_items, with_items, write_items
from st_magnitude.lab.replication.overrides import apply_overrides
from st_magnitude.lab.replication.pool_sizes import check_pool_sizes
from st_magnitude.lab.replication.resume import find_resumable, run_differences
from st_magnitude.lab.replication.run_file import RULE_INPUT_ERRORS, read_run, refuse_unreadable_decision

logger = logging.getLogger(__name__)

__all__ = ["redecide", "run_claim", "slim"]

#: keys holding per-item arrays, dropped from the small summary file (kept in its per-item values file)
_BULKY = PER_ITEM_KEYS


def run_name(claim_id: str, profile: str, tag: str | None) -> str:
    """``<claim>-<profile>[-<tag>]``: the summary's file name and the full results' prefix; each part a safe
    file-name part (:func:`~st_magnitude._trust.check_name`), so the name never leads out of its folder."""
    parts = [check_name(claim_id, "claim"), check_name(profile, "profile")]
    return "-".join(parts + ([check_name(tag, "tag")] if tag is not None else []))


def _finished(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    rec = read_run(path)
    return rec if rec["status"] == "finished" else None


def check_replace(path: Path, seeds: int, force: bool, record: dict[str, Any] | None = None) -> None:
    """Refuse to replace a finished result that has more seeds than ``seeds`` (weaker evidence), or a file that is no
    run record, unless ``force``.

    With the new ``record``, a replaced result that differs from it in anything that changes a seed's numbers
    (settings, bf16, device, GPU, torch) is named in a warning: the page then shows another run, not a re-run."""
    try:
        existing = _finished(path)
    except InputFileError:
        if not force:
            raise
        logger.warning("%s: replacing a file that is no readable run record (--force)", path)
        return
    if existing is None:
        return
    have = len(existing["seeds"])
    if have > seeds and not force:
        raise ValueError(
            f"{path} holds a finished {have}-seed result; this run has {seeds} seed(s) and would replace it with "
            "weaker evidence. Pass --force to replace it, or leave out --results (the run then writes only to "
            "--output)"
        )
    differ = run_differences(existing, record) if record is not None else []
    if differ:
        logger.warning(
            "%s: replacing a finished %d-seed result (finished %s) with a run that differs in %s; the old result "
            "is gone from this folder (git keeps it if it was committed)",
            path,
            have,
            existing.get("finished_utc", "at an unrecorded time"),
            ", ".join(differ),
        )


def slim(obj: Any) -> Any:
    """``obj`` without the per-item arrays (for the small summary file)."""
    if isinstance(obj, dict):
        return {k: slim(v) for k, v in obj.items() if k not in _BULKY}
    if isinstance(obj, list):
        return [slim(v) for v in obj]
    return obj


#: The options of a recorded command that name this machine's folders (they do not change the result); a run made
#: before the CLI had one vocabulary recorded them as ``--out`` and ``--data`` (its parts can still be merged).
_MACHINE_FOLDER_OPTIONS = ("-o", "--output", "--data-root", "--out", "--data")


def public_command(command: str) -> str:
    """The recorded command without ``-o/--output DIR`` (a machine's scratch folder) and ``--data-root DIR`` (its data
    folder): neither changes the result."""
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    joined = tuple(f"{o}=" for o in _MACHINE_FOLDER_OPTIONS if o.startswith("--")) + ("-o",)  # --output=DIR, -oDIR
    kept, skip = [], False
    for w in words:
        if skip:
            skip = False
        elif w in _MACHINE_FOLDER_OPTIONS:
            skip = True
        elif not w.startswith(joined):
            kept.append(w)
    return shlex.join(kept)


def summary(record: dict[str, Any]) -> dict[str, Any]:
    """The committed summary of a run: :func:`slim`, with nothing that names this machine's folders (the command
    without its folders; the full result by file name only)."""
    out = slim(record)
    out.pop("summary_result", None)
    out["command"] = public_command(out.get("command", ""))
    if out.get("full_result"):
        out["full_result"] = Path(out["full_result"]).name
    return out


def run_claim(
    claim_id: str,
    *,
    profile: str = "cpu",
    seeds: int = 5,
    first_seed: int = 0,
    data: str | None = None,
    out: str | os.PathLike = "runs/replication",
    results: str | os.PathLike | None = None,
    force: bool = False,
    device: str | None = None,
    model: str | None = None,
    command: str | None = None,
    overrides: dict[str, Any] | None = None,
    tag: str | None = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Run ``claim_id`` with ``profile`` for ``seeds`` seeds; returns the full record (also written to disk).

    ``tag`` names a variant run (e.g. a control with ``overrides``): its summary is ``<claim>-<profile>-<tag>.json``
    and the report shows it as an extra row instead of replacing the main one. ``results``: the folder of the small
    summary (none when None); an existing summary with more seeds is kept unless ``force``.
    ``dry_run``: the profile's code path at the claim's tiny sizes (:attr:`Claim.dry_run`); never writes ``results``.
    """
    if tag is not None:
        check_name(tag, "tag")  # the rule of --tag: the tag becomes part of file names
    claim = get_claim(claim_id)
    settings = claim.settings(profile, dry_run=dry_run)
    if dry_run:
        results, tag = None, tag or "dry-run"  # the CLI refuses --dry-run --results; called in code, none is written
    apply_overrides(settings, overrides or {}, f"{claim_id}/{profile}")
    if seeds < 1:
        raise ValueError(f"seeds must be at least 1, got {seeds}")
    name = run_name(claim_id, profile, tag)
    check_output_dir(out, "--output")  # a read-only folder is found now, not after training
    if results is not None:
        check_output_dir(results, "--results")
        check_replace(Path(results) / f"{name}.json", seeds, force)
    device, bf16 = resolve_device(device)
    data_dir = resolve_data_dir(data)
    if model is not None:
        check_model_arg(model)  # a missing or hostile --model is refused before anything is written
    out = Path(out)  # created by the first write, so a run refused before its first seed leaves no folder
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    full_path = out / f"{name}-{stamp}.json"
    record: dict[str, Any] = {
        "claim": claim_id,
        "paper": claim.paper,
        "title": claim.title,
        "statement": claim.statement,
        "paper_number": claim.paper_number,
        "verdict_rule": claim.verdict_rule,
        "profile": profile,
        "tag": tag,
        "dry_run": dry_run,
        "settings": settings,
        "model_override": model,
        "setting_differences": claim.differences.get(profile, []),
        "can_establish": claim.can_establish.get(profile, ""),
        "command": command or " ".join(shlex.quote(a) for a in ["st-magnitude", *sys.argv[1:]]),
        "machine": machine_info(device),
        "bf16": bf16,
        "started_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "seeds": [],
        "status": "running",
    }
    logger.info("claim %s (%s): full result -> %s", claim_id, profile, full_path)
    base = Context(profile, settings, first_seed, data_dir, device, bf16, Path(), model)
    wanted = list(range(first_seed, first_seed + seeds))
    created = not out.exists()
    try:
        with seed_locks(out, name, wanted):  # a second run of one of these seeds refuses here, before any work
            return _run_seeds(claim, record, base, out, name, full_path, wanted, results, force)
    finally:
        if created and out.is_dir() and not any(out.iterdir()):  # a run that wrote nothing leaves no folder
            out.rmdir()


@contextmanager
def seed_locks(out: Path, name: str, seeds: list[int]) -> Iterator[None]:
    """Hold ``out/.<name>-seed<k>.lock`` for every seed ``k`` of run ``name`` (:class:`OutputLock`): two runs of
    the same seed (an identical command started twice) cannot both resume one partial file or train that seed;
    parts with other seeds (``--first-seed K --seeds 1`` at once) run side by side."""
    with ExitStack() as stack:
        for seed in seeds:
            lock = OutputLock(
                out, f".{name}-seed{seed}.lock", what=f"seed {seed} of run {name} in {out}",
                advice="run other seeds (--first-seed, --seeds) or use another --output",
            )  # fmt: skip
            stack.enter_context(lock)
        yield


def _new_file(out: Path, name: str) -> Path:
    """A new full-result file of run ``name``, created empty and exclusively: parts of one run started in the same
    second get files of their own (the next free second's stamp)."""
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.now(timezone.utc)
    for i in range(3600):
        path = out / f"{name}-{(now + timedelta(seconds=i)).strftime('%Y%m%dT%H%M%SZ')}.json"
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"{out} holds a full result of {name} for every second of the next hour")


def _run_seeds(
    claim: Claim,
    record: dict[str, Any],
    base: Context,
    out: Path,
    name: str,
    full_path: Path,
    wanted: list[int],
    results: str | os.PathLike | None,
    force: bool,
) -> dict[str, Any]:
    """Run the ``wanted`` seeds of ``record``'s run (continuing its partial file when there is one), decide and
    write; called with the seeds' locks held."""
    claim_id, profile, settings, seeds = record["claim"], base.profile, base.settings, len(wanted)
    total = Meter()
    resumable = find_resumable(out, name, record, wanted)
    if resumable is not None:  # a killed run of the same configuration: continue its file after its last seed
        full_path, saved = resumable
        done = [s["seed"] for s in saved["seeds"]]
        logger.warning("resuming %s: seeds %s are done, running %s", full_path, done, wanted[len(done) :])
        record["seeds"], record["started_utc"] = saved["seeds"], saved.get("started_utc", record["started_utc"])
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        record["resumed_utc"] = [*saved.get("resumed_utc", []), now]
        # the killed process's own cost up to its last finished seed (not what it had resumed itself); the record's
        # "resources" adds them to this process's ("resources_process")
        killed = saved.get("resources_process", saved.get("resources"))
        record["resources_before_resume"] = [*saved.get("resources_before_resume", []), killed]
        wanted = wanted[len(done) :]
    with tempfile.TemporaryDirectory(prefix=f"replicate-{claim_id}-") as work:
        for seed in wanted:
            set_seed(seed)
            ctx = dataclasses.replace(base, seed=seed, work_dir=Path(work))
            meter = Meter()
            logger.info("claim %s (%s): seed %d", claim_id, profile, seed)
            with warnings.catch_warnings():
                # the claims strip Normalize and score asymmetric similarities on purpose (the record names every
                # setting): the package's warnings about those choices are noise in its own runs
                warnings.filterwarnings("ignore", category=MagnitudeCollapseWarning)
                warnings.filterwarnings("ignore", category=AsymmetricSimilarityWarning)
                result = claim.run_seed(ctx)
            result["seed"] = seed
            result["resources"] = meter.read()
            result["wall_seconds"] = result["resources"]["wall_seconds"]
            record["seeds"].append(result)
            record["resources_process"] = total.read()
            record["resources"] = with_earlier_processes(
                record["resources_process"], record.get("resources_before_resume")
            )
            record["wall_seconds"] = record["resources"]["wall_seconds"]
            first = resumable is None and len(record["seeds"]) == 1
            if first:  # the first write of a new run: a file of its own
                full_path = _new_file(out, name)
            try:
                write_json_atomic(full_path, record, indent=1)
            except BaseException:
                if first:  # no empty file left for a later run to stumble on
                    full_path.unlink(missing_ok=True)
                raise
    record["decision"] = claim.decide(record["seeds"], settings)
    record["verdict"] = record["decision"]["verdict"]
    record["status"] = "finished"
    record["resources_process"] = total.read()
    record["resources"] = with_earlier_processes(record["resources_process"], record.get("resources_before_resume"))
    record["wall_seconds"] = record["resources"]["wall_seconds"]
    record["finished_utc"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    write_json_atomic(full_path, record, indent=1)
    record["full_result"] = str(full_path)
    if results is not None:
        # again: a run beside this one may have written since
        check_replace(Path(results) / f"{name}.json", seeds, force, record)
        record["summary_result"] = str(Path(results) / f"{name}.json")
        write_json_atomic(Path(results) / f"{name}.json", summary(record), indent=1)
        write_items(record, Path(results) / f"{name}.json")
    return record


def has_items(record: dict[str, Any]) -> bool:
    """Whether ``record`` holds per-item values (a full result), not only a summary's aggregates."""
    return slim(record.get("seeds", [])) != record.get("seeds", [])


def decide_again(record: dict[str, Any]) -> None:
    """Decide ``record`` (its ``seeds`` and ``settings``) by its claim's current rule, in place. When that rule's text
    differs from the one the run was made under, the record carries the current text and keeps the earlier one as
    ``verdict_rule_when_run``, so the page can say the verdict comes from a revised rule.

    A summary (no per-item values) is judged again from what its decision stores (:func:`judge_again`)."""
    claim = get_claim(record["claim"])
    if record.get("verdict_rule") != claim.verdict_rule:
        record.setdefault("verdict_rule_when_run", record.get("verdict_rule"))
        record["verdict_rule"] = claim.verdict_rule
    if has_items(record):
        record["decision"] = claim.decide(record["seeds"], record["settings"])
    else:
        judge_again(record)
    record["verdict"] = record["decision"]["verdict"]
    record["status"] = "finished"


def judge_again(record: dict[str, Any]) -> None:
    """Judge a summary's stored decision again by its claim's current rule (:attr:`Claim.judge`), in place: the
    comparisons, their intervals and the gates stay those of the run (nothing is recomputed from items); the
    statements, the multiplicity rule and the verdict are the current rule's. ``decision["judged_from"]`` says so."""
    from st_magnitude.lab.replication.gates import apply_gates, judge_stored

    claim = get_claim(record["claim"])
    old = record["decision"]
    new = (
        claim.judge(old, record["settings"])
        if claim.judge is not None
        else judge_stored(old, "the paper's claim", claim.statement)
    )
    kept = {k: v for k, v in old.items() if k not in ("ungated_verdict", "gate_note", "parts", "statements", "note")}
    decision = {**kept, **new}
    apply_gates(decision, old.get("gates", []))
    if new.get("untested"):
        decision["verdict"] = new["verdict"]
    decision["judged_from"] = (
        "the summary's stored comparisons and intervals (no per-item values): statements and verdict by the "
        "current rule, intervals as run"
    )
    record["decision"] = decision


def redecide(full_result: str | os.PathLike, results: str | os.PathLike | None = None) -> dict[str, Any]:
    """Recompute the comparisons and the verdict of a finished run from its stored per-item scores (no training):
    for a fix in the statistics, or after a run whose ``decide`` failed. The verdict rule is the claim's own.

    A summary is decided from the per-item values beside it (:func:`~st_magnitude.lab.replication.items.items_path`)
    and written again as a summary; a summary without them is never rewritten in place: it is judged again from its
    stored comparisons (:func:`judge_again`) only into ``results``, another file. ``record["written"]`` lists the
    files written."""
    path = Path(full_result)
    record = read_run(path, seeds_required=True)  # names, types, known keys only
    check_output_file(path, "the full result")  # rewritten in place: a read-only file is found before deciding
    if results is not None:
        check_output_dir(results, "--results")
    name = run_name(record["claim"], record["profile"], record.get("tag"))
    target = None if results is None else Path(results) / f"{name}.json"
    is_summary = not has_items(record)
    if is_summary:
        record = _with_evidence(path, record, target)
    try:  # the pools' sizes against the run's own pooled AUC and setting, naming the file that holds them
        check_pool_sizes(record["seeds"], (record.get("settings") or {}).get("auc_negatives"))
    except ValueError as exc:
        raise InputFileError(items_path(path) if is_summary and has_items(record) else path, str(exc)) from None
    try:
        decide_again(record)
    except InputFileError:
        raise
    except RULE_INPUT_ERRORS as exc:  # seed records the claim's rule cannot read
        raise refuse_unreadable_decision([path], record["claim"], exc) from exc
    record["redecided_utc"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    written = []
    if not is_summary:
        write_json_atomic(path, record, indent=1)
        record["full_result"] = str(path)
        written.append(path)
    elif has_items(record):  # its values put back: written again as a summary, beside the same values
        write_json_atomic(path, summary(record), indent=1)
        write_items(record, path)
        written.append(path)
    if target is not None:
        record["summary_result"] = str(target)
        write_json_atomic(target, summary(record), indent=1)
        write_items(record, target)
        written.append(target)
    record["written"] = [str(p) for p in dict.fromkeys(written)]
    return record


def _with_evidence(path: Path, record: dict[str, Any], target: Path | None) -> dict[str, Any]:
    """The summary ``record`` read from ``path`` with the per-item values beside it put back; without them, the
    summary itself when it is written to ``target`` (another file), else one :class:`InputFileError`."""
    beside = items_path(path)
    if beside.is_file():
        try:
            return with_items(record, read_items(beside))
        except InputFileError:
            raise
        except ValueError as exc:
            raise InputFileError(beside, f"does not belong to {path.name}: {exc}") from None
    if target is None or target.resolve() == path.resolve():
        raise InputFileError(
            path,
            f"holds no per-item values ({', '.join(PER_ITEM_KEYS)}) and no {beside.name} lies beside it, so its "
            "decision is not rewritten in place; pass the full result (from --output), or --results DIR (another "
            "folder) to write it judged again from its stored comparisons there",
        )
    return record
