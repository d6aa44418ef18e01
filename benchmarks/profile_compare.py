"""Where `st-magnitude compare` spends its CPU time: phase spans (CPU-seconds and wall) of one real run.

Runs the CLI's own code path (``st_magnitude.cli.main(["compare", ...])``) with thin wrappers around the functions
that make up each phase, and attributes every CPU-second (``time.process_time``: all threads of the process) to the
innermost phase running at the time. On a shared machine CPU-seconds are the steady measure; wall is printed beside.

    python benchmarks/profile_compare.py --out runs/profile-compare -- --quick
    python benchmarks/profile_compare.py --out runs/profile-compare --json profile.json -- --quick --variants qnorm

Phases: ``imports`` (the package, torch, sentence-transformers), ``setup`` (base model, evaluation sets, training
pairs), ``base eval`` (the untrained model on the evaluation sets), ``kappa`` (the κ rule), ``train: model load``,
``train: steps`` (the Trainer's loop), ``saving`` (Trainer checkpoints and the final model), ``eval: model load``,
``eval`` (encoding and scoring the trained models), ``reports`` (results table and plots), ``other``.
The output folder must be new or empty (a resumed run skips the work being measured).
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import sys
import time
from pathlib import Path

_T0 = (time.process_time(), time.perf_counter())


class Spans:
    """Exclusive CPU and wall seconds per phase: the innermost open phase gets the time."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = {}
        self.wall: dict[str, float] = {}
        self.stack: list[str] = ["imports"]
        self.last = _T0

    def _charge(self) -> None:
        now = (time.process_time(), time.perf_counter())
        top = self.stack[-1]
        self.cpu[top] = self.cpu.get(top, 0.0) + now[0] - self.last[0]
        self.wall[top] = self.wall.get(top, 0.0) + now[1] - self.last[1]
        self.last = now

    def enter(self, name: str) -> None:
        self._charge()
        self.stack.append(name)

    def leave(self) -> None:
        self._charge()
        self.stack.pop()

    def wrap(self, owner, attr: str, name: str) -> None:
        original = getattr(owner, attr)

        @functools.wraps(original)
        def spanned(*args, **kwargs):
            self.enter(name)
            try:
                return original(*args, **kwargs)
            finally:
                self.leave()

        setattr(owner, attr, spanned)


def _instrument(spans: Spans) -> None:
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer

    from st_magnitude.lab.compare import compare, training

    spans.wrap(compare, "load_base_model", "setup")
    spans.wrap(compare, "load_eval_sets", "setup")
    spans.wrap(compare, "training_pairs", "setup")
    spans.wrap(compare, "_base_reference", "base eval")
    spans.wrap(compare, "_kappa_step", "kappa")
    spans.wrap(compare, "train_run", "train: steps")
    spans.wrap(training, "load_base_model", "train: model load")  # the run's own copy of the base model
    spans.wrap(SentenceTransformerTrainer, "_save_checkpoint", "saving")
    spans.wrap(SentenceTransformer, "save", "saving")
    spans.wrap(compare, "_evaluate_and_record", "eval")
    import st_magnitude.model.load as models

    spans.wrap(models, "load_model", "eval: model load")  # imported inside _evaluate_and_record, from this module
    spans.wrap(compare, "write_reports", "reports")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="compare's --output (new or empty)")
    p.add_argument("--json", help="write the phase table here as JSON")
    p.add_argument("compare_args", nargs="*", help="arguments after -- go to `st-magnitude compare`")
    args = p.parse_args(argv)
    out = Path(args.out)
    if out.exists() and any(out.iterdir()):
        p.error(f"{out} is not empty: a resumed compare skips the work this measures")

    spans = Spans()
    import torch  # noqa: F401 - counted as imports

    from st_magnitude.cli import main as cli_main

    _instrument(spans)
    spans.enter("other")
    rc = cli_main(["compare", *args.compare_args, "--output", str(out)])
    spans.leave()
    spans._charge()

    total_cpu, total_wall = sum(spans.cpu.values()), sum(spans.wall.values())
    order = sorted(spans.cpu, key=lambda k: -spans.cpu[k])
    print(f"\n{'phase':20s} {'CPU-s':>8s} {'share':>6s} {'wall s':>8s}")
    for k in order:
        print(f"{k:20s} {spans.cpu[k]:8.1f} {spans.cpu[k] / total_cpu:6.1%} {spans.wall[k]:8.1f}")
    print(f"{'total':20s} {total_cpu:8.1f} {1:6.1%} {total_wall:8.1f}")
    if args.json:
        import os

        import torch

        record = {
            "command": "st-magnitude compare " + " ".join(args.compare_args),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}",
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "phases": {k: {"cpu_s": round(spans.cpu[k], 2), "wall_s": round(spans.wall[k], 2)} for k in order},
            "total": {"cpu_s": round(total_cpu, 2), "wall_s": round(total_wall, 2)},
            "exit": rc,
        }
        Path(args.json).write_text(json.dumps(record, indent=2) + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
