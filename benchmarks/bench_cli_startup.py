"""How long ``st-magnitude`` takes to answer ``--help``, a usage error or a missing path, against
``python -c "import sentence_transformers"`` on the same machine in the same run.

Every case runs ``python -m st_magnitude.cli ...`` in a fresh interpreter (as the ``st-magnitude`` script does) and
must end with the exit code it expects (0 for ``--help``, 2 for an error) and, for an error, the expected words on
stderr; a case that answers otherwise is reported as a failure, not timed as a success. Each case and the reference
import run ``--repeats`` times, interleaved; the table gives the minimum and median wall time, the median
CPU-seconds (user + system of the child), the ratio of the minimum to the reference's minimum and the ratio of the
median CPU-seconds (the fairer one on a loaded machine). Goal: every wall ratio <= 0.15 (``--goal``). Which modules a
case loads is not measured here: ``tests/cli/test_startup.py`` checks that no torch / sentence-transformers /
transformers is imported before a command's error or ``--help``.

    .venv/bin/python benchmarks/bench_cli_startup.py                  # 3 repeats, a minute on 2 cores
    .venv/bin/python benchmarks/bench_cli_startup.py --repeats 5 --out runs/bench_cli_startup.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from st_magnitude.cli import command_paths

ROOT = Path(__file__).resolve().parent.parent


def error_cases(tmp: Path) -> list[tuple[list[str], str]]:
    """(arguments, words the one-line error must contain): a missing path or a usage error for every command; MODEL
    is a folder with a ``modules.json`` and DATA a BEIR folder with a ``test`` split, which pass the path checks."""
    missing, out = str(tmp / "missing"), str(tmp / "out")
    model, data = tmp / "model", tmp / "beir" / "toy"
    model.mkdir(exist_ok=True)
    (model / "modules.json").write_text("[]")
    (data / "qrels").mkdir(parents=True, exist_ok=True)
    (data / "corpus.jsonl").write_text('{"_id": "d1", "text": "a"}\n')
    (data / "queries.jsonl").write_text('{"_id": "q1", "text": "a"}\n')
    (data / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    model, data = str(model), str(data)
    return [
        (["evaluate", missing, "--data", "x"], "does not exist"),
        (["evaluate", model, "--data", missing], "does not exist"),
        (["evaluate", model, "--data", data, "--split", "dev"], "Available splits"),
        (["evaluate", model], "--data"),  # usage error: a required option left out
        (["inspect", missing], "does not exist"),
        (["strip", missing], "modules.json"),
        (["convert", missing, "qnorm", "-o", out], "does not exist"),
        (["export", missing, "-o", out], "does not exist"),
        (["diagnose", missing, "--data", data, "-o", out], "does not exist"),
        (["calibrate", model, "--data", data], "no qrels for split 'train'"),
        (["mteb", "run", "-m", missing, "-t", data], "does not exist"),
        (["mteb", "run", "-m", model, "-t", missing], "does not exist"),
        (["compare", "--model", missing, "-o", out], "does not exist"),
        (["compare", "--steps", "many"], "invalid int value"),  # usage error: a number that is not one
        (["replicate", "no-such-claim", "-o", out], "no-such-claim"),
        (["scaling", "fit", missing + ".csv"], "missing.csv"),
        (["scaling", "choose", "--budget", "lots"], "expected a number"),
    ]


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, subprocess.CompletedProcess]:
    """Wall seconds, CPU-seconds (user + system of the child) and the finished process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("--repeats", type=int, default=3, help="runs of every case (>= 3 for a median; default 3)")
    p.add_argument("--goal", type=float, default=0.15, help="largest ratio to the reference import (default 0.15)")
    p.add_argument("--only", nargs="+", default=None, metavar="COMMAND", help="time only these commands")
    p.add_argument("--out", default=None, metavar="JSON", help="also write the rows as JSON")
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error("--repeats must be >= 1")

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    reference = [sys.executable, "-c", "import sentence_transformers"]
    with tempfile.TemporaryDirectory() as tmp:
        cases = [(["--help"], "")] + [([*c, "--help"], "") for c in command_paths()] + error_cases(Path(tmp))
        if args.only:
            cases = [c for c in cases if c[0][0] in args.only]
        times: dict[str, list[tuple[float, float]]] = {"import sentence_transformers": []}
        failures: list[str] = []
        for _ in range(args.repeats):  # interleaved, so a change of load hits every case alike
            wall, cpu, proc = _timed(reference, env)
            if proc.returncode != 0:
                raise SystemExit(f"the reference import failed: {proc.stderr.strip()[-300:]}")
            times["import sentence_transformers"].append((wall, cpu))
            for words, expect in cases:
                name = "st-magnitude " + " ".join(w.replace(tmp, "TMP") for w in words)
                wall, cpu, proc = _timed([sys.executable, "-m", "st_magnitude.cli", *words], env)
                want = 2 if expect else 0
                if proc.returncode != want or expect not in proc.stderr:
                    failures.append(f"{name}: exit {proc.returncode} (expected {want}): {proc.stderr.strip()[-300:]}")
                times.setdefault(name, []).append((wall, cpu))

    ref_min = min(w for w, _ in times["import sentence_transformers"])
    ref_cpu = statistics.median(c for _, c in times["import sentence_transformers"])
    rows = []
    for name, runs in times.items():
        walls = [w for w, _ in runs]
        rows.append(
            {
                "command": name,
                "min_s": min(walls),
                "median_s": statistics.median(walls),
                "cpu_s": statistics.median(c for _, c in runs),
                "ratio": min(walls) / ref_min,
                "cpu_ratio": statistics.median(c for _, c in runs) / ref_cpu,
            }
        )
    width = max(len(r["command"]) for r in rows)
    print(f"{'command':<{width}}  {'min s':>6}  {'median s':>8}  {'CPU s':>6}  {'ratio':>6}  {'CPU ratio':>9}")
    for r in rows:
        print(
            f"{r['command']:<{width}}  {r['min_s']:6.3f}  {r['median_s']:8.3f}  {r['cpu_s']:6.3f}  {r['ratio']:6.3f}"
            f"  {r['cpu_ratio']:9.3f}"
        )
    worst = max((r for r in rows if r["command"] != "import sentence_transformers"), key=lambda r: r["ratio"])
    ok = worst["ratio"] <= args.goal and not failures
    print(f"largest ratio {worst['ratio']:.3f} ({worst['command']}; goal <= {args.goal}); repeats {args.repeats}")
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average (1 / 5 / 15 min) at the end: {load} on {os.cpu_count()} CPUs ({platform.node()})")
    for line in failures:
        print(f"FAILED {line}", file=sys.stderr)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        record = {"repeats": args.repeats, "goal": args.goal, "loadavg": os.getloadavg(), "cpus": os.cpu_count()}
        record["rows"] = rows
        Path(args.out).write_text(json.dumps({**record, "failures": failures}, indent=2) + "\n", encoding="utf-8")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
