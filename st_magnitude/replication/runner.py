"""Run one claim for N seeds and write its result JSON.

Two files per run:

- ``OUT/<claim>-<profile>-<UTC time>.json`` — everything, including per-seed per-arm per-query scores (and pooled
  AUC pools) so the bootstrap can be redone; the partial file is rewritten after every seed.
- ``RESULTS/<claim>-<profile>.json`` — the same without the per-item arrays (small; ``docs/replication.md`` is
  generated from these by ``st-magnitude replicate --report``).
"""

from __future__ import annotations

import json
import logging
import os
import platform
import shlex
import socket
import sys
import tempfile
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from st_magnitude._files import write_json_atomic
from st_magnitude._warnings import AsymmetricSimilarityWarning, MagnitudeCollapseWarning
from st_magnitude.replication.claims import get_claim
from st_magnitude.replication.common import Context, resolve_data_dir, resolve_device, set_seed

logger = logging.getLogger(__name__)

__all__ = ["machine_info", "redecide", "run_claim", "slim"]

#: keys holding per-item arrays, dropped from the small summary file
_BULKY = ("per_query", "auc_pools", "predictions", "labels", "history")


def machine_info(device: str) -> dict[str, Any]:
    info = {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": device,
    }
    try:
        import sentence_transformers
        import transformers

        info["sentence_transformers"] = sentence_transformers.__version__
        info["transformers"] = transformers.__version__
    except ImportError:  # pragma: no cover
        pass
    if device.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def slim(obj: Any) -> Any:
    """``obj`` without the per-item arrays (for the small summary file)."""
    if isinstance(obj, dict):
        return {k: slim(v) for k, v in obj.items() if k not in _BULKY}
    if isinstance(obj, list):
        return [slim(v) for v in obj]
    return obj


def public_command(command: str) -> str:
    """The recorded command without ``--out DIR`` (a machine's scratch folder; it does not change the result)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    kept, skip = [], False
    for w in words:
        if skip:
            skip = False
        elif w == "--out":
            skip = True
        elif not w.startswith("--out="):
            kept.append(w)
    return shlex.join(kept)


def summary(record: dict[str, Any]) -> dict[str, Any]:
    """The committed summary of a run: :func:`slim`, with nothing that names this machine's folders (the command
    without ``--out``; the full result by file name only)."""
    out = slim(record)
    out["command"] = public_command(out.get("command", ""))
    if out.get("full_result"):
        out["full_result"] = Path(out["full_result"]).name
    return out


def run_claim(
    claim_id: str,
    *,
    profile: str = "cpu",
    seeds: int = 3,
    first_seed: int = 0,
    data: str | None = None,
    out: str | os.PathLike = "runs/replication",
    results: str | os.PathLike | None = None,
    device: str | None = None,
    model: str | None = None,
    command: str | None = None,
    overrides: dict[str, Any] | None = None,
    tag: str | None = None,
) -> dict[str, Any]:
    """Run ``claim_id`` with ``profile`` for ``seeds`` seeds; returns the full record (also written to disk).

    ``tag`` names a variant run (e.g. a control with ``overrides``): its summary is ``<claim>-<profile>-<tag>.json``
    and the report shows it as an extra row instead of replacing the main one.
    """
    if tag is not None and (not tag or not all(c.isalnum() or c in "-_." for c in tag)):
        raise ValueError(f"tag must be a non-empty name of letters, digits, '-', '_' or '.', got {tag!r}")
    claim = get_claim(claim_id)
    settings = claim.settings(profile)
    for k, v in (overrides or {}).items():
        if k not in settings:
            raise ValueError(f"unknown setting {k!r} for claim {claim_id}/{profile}; valid: {', '.join(settings)}")
        old = settings[k]
        settings[k] = (
            type(old)(v) if isinstance(old, (int, float, str)) and not isinstance(old, bool) and v is not None else v
        )
    if seeds < 1:
        raise ValueError(f"seeds must be at least 1, got {seeds}")
    device, bf16 = resolve_device(device)
    data_dir = resolve_data_dir(data)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    name = f"{claim_id}-{profile}" + (f"-{tag}" if tag else "")
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
        "settings": settings,
        "model_override": model,
        "setting_differences": claim.differences.get(profile, []),
        "budget": claim.budget.get(profile, ""),
        "command": command or " ".join(shlex.quote(a) for a in ["st-magnitude", *sys.argv[1:]]),
        "machine": machine_info(device),
        "bf16": bf16,
        "started_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "seeds": [],
        "status": "running",
    }
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"replicate-{claim_id}-") as work:
        for seed in range(first_seed, first_seed + seeds):
            set_seed(seed)
            ctx = Context(profile, settings, seed, data_dir, device, bf16, Path(work), model)
            ts = time.perf_counter()
            logger.info("claim %s (%s): seed %d", claim_id, profile, seed)
            with warnings.catch_warnings():
                # the claims strip Normalize and score asymmetric similarities on purpose (the record names every
                # setting): the package's warnings about those choices are noise in its own runs
                warnings.filterwarnings("ignore", category=MagnitudeCollapseWarning)
                warnings.filterwarnings("ignore", category=AsymmetricSimilarityWarning)
                result = claim.run_seed(ctx)
            result["seed"] = seed
            result["wall_seconds"] = time.perf_counter() - ts
            record["seeds"].append(result)
            record["wall_seconds"] = time.perf_counter() - t0
            write_json_atomic(full_path, record, indent=1)
    record["decision"] = claim.decide(record["seeds"], settings)
    record["verdict"] = record["decision"]["verdict"]
    record["status"] = "finished"
    record["wall_seconds"] = time.perf_counter() - t0
    record["finished_utc"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    write_json_atomic(full_path, record, indent=1)
    record["full_result"] = str(full_path)
    if results is not None:
        write_json_atomic(Path(results) / f"{name}.json", summary(record), indent=1)
    return record


def redecide(full_result: str | os.PathLike, results: str | os.PathLike | None = None) -> dict[str, Any]:
    """Recompute the comparisons and the verdict of a finished run from its stored per-item scores (no training):
    for a fix in the statistics, or after a run whose ``decide`` failed. The verdict rule is the claim's own."""
    path = Path(full_result)
    record = json.loads(path.read_text())
    if not record.get("seeds"):
        raise ValueError(f"{path} holds no finished seed")
    claim = get_claim(record["claim"])
    record["decision"] = claim.decide(record["seeds"], record["settings"])
    record["verdict"] = record["decision"]["verdict"]
    record["status"] = "finished"
    record["redecided_utc"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    write_json_atomic(path, record, indent=1)
    record["full_result"] = str(path)
    if results is not None:
        name = f"{record['claim']}-{record['profile']}" + (f"-{record['tag']}" if record.get("tag") else "")
        write_json_atomic(Path(results) / f"{name}.json", summary(record), indent=1)
    return record
