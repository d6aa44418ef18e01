"""Resuming a ``replicate`` run that was killed: find its partial full-result file and continue after its last seed.

The runner rewrites ``OUT/<claim>-<profile>[-<tag>]-<UTC time>.json`` atomically after every seed with
``"status": "running"``, so a kill (even ``kill -9``) leaves a readable file holding every finished seed. A new run
with the same claim, profile, tag, settings, model, device and precision, whose seed range starts with the seeds
already done, continues that file: each seed seeds its own RNGs (``set_seed``), so the finished record is what an
uninterrupted run writes. A partial file that does not match is left as it is and the run starts clean in a new
file, saying why. The committed summary (``RESULTS/<name>.json``) is written only when a run finishes, so a kill
never touches it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from st_magnitude._trust import InputFileError
from st_magnitude.lab.replication.run_file import read_run

logger = logging.getLogger(__name__)

__all__ = ["MACHINE_KEYS", "RESUME_KEYS", "find_resumable", "run_differences"]

#: what must be equal for a partial run to be continued (or for runs to be merged)
RESUME_KEYS = ("claim", "profile", "tag", "settings", "model_override", "bf16", "dry_run")
#: fields of ``record["machine"]`` that change the numbers a seed produces
MACHINE_KEYS = ("device", "gpu", "torch")


def run_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """What differs between two run records in anything that changes a seed's numbers (empty: the same run)."""
    differ = [k for k in RESUME_KEYS if a.get(k) != b.get(k)]
    ma, mb = a.get("machine") or {}, b.get("machine") or {}
    return differ + [k if k == "device" else f"machine {k}" for k in MACHINE_KEYS if ma.get(k) != mb.get(k)]


def _mismatch(saved: dict[str, Any], fresh: dict[str, Any], seeds: list[int]) -> str | None:
    """Why ``saved`` (a partial record) cannot be continued by ``fresh`` for ``seeds``, or ``None`` when it can."""
    differ = run_differences(saved, fresh)
    if differ:
        return f"different {', '.join(differ)}"
    done = [s["seed"] for s in saved["seeds"]]  # checked by read_run
    if done != seeds[: len(done)]:
        return f"its seeds {done} are not the start of the requested seeds {seeds}"
    return None


def find_resumable(out: Path, name: str, fresh: dict[str, Any], seeds: list[int]) -> tuple[Path, dict] | None:
    """The newest partial full-result file for run ``name`` in ``out`` that ``fresh`` (the new run's record) can
    continue for ``seeds``, with its record; ``None`` (and a log line per partial file that cannot be) otherwise."""
    if not out.is_dir():
        return None
    for path in sorted(out.glob(f"{name}-*.json"), reverse=True):
        stamp = path.stem[len(name) + 1 :]
        if not (len(stamp) == 16 and stamp.endswith("Z") and stamp[8] == "T"):  # another run's name shares the prefix
            continue
        try:
            saved = read_run(path)  # names, types, known keys only
        except InputFileError as exc:
            logger.warning("cannot resume from it (%s); starting a new run, that file is kept", exc)
            continue
        if saved["status"] != "running":
            continue
        why = _mismatch(saved, fresh, seeds)
        if why is None:
            return path, saved
        logger.warning("cannot resume from %s (%s); starting a new run, that file is kept as it is", path, why)
    return None
