"""Run every benchmark and print their ours-vs-baseline ratios side by side, then the latest quality table.

Each benchmark script measures ours and the sentence-transformers / BEIR baseline in the same process (medians of
several runs) and prints lines such as ``ratio ours / BEIR = 0.41 (goal <= 1.0)``. This runner starts them one
after another, keeps their full output under ``runs/benchmarks/``, and prints the ratio / goal lines together.

    .venv/bin/python benchmarks/run_all.py                # reduced sizes, a few minutes on 2 cores
    .venv/bin/python benchmarks/run_all.py --full         # the sizes named in the issues
    .venv/bin/python benchmarks/run_all.py --only search losses

The quality table is ``results.md`` of the newest ``st-magnitude compare`` run (``--compare-dir``).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATA = Path(os.environ.get("ST_MAGNITUDE_DATA", ROOT.parent / "shared" / "data")) / "beir"  # docs: Data

#: name -> (script, reduced arguments, full arguments)
BENCHMARKS: dict[str, tuple[str, list[str], list[str]]] = {
    # reduced sizes still measure what the goals name: MiniLM steps (a tiny model's step is a few ms, so its ratio
    # measured thread wake-ups, not the loss), and peak memory of a real MiniLM step (the tiny model's ~1 MiB peaks
    # were noise); "auto" falls back to the tiny model, with a note, only where the MiniLM wheel is missing
    "losses": (
        "bench_losses.py",
        ["--model", "auto", "--batch", "64", "--repeats", "3"]
        + ["--mem-model", "auto", "--mem-batch", "128", "--mem-repeats", "2", "--mem-chunk-sizes", "0"],
        ["--model", "minilm", "--batch", "64", "--mem-model", "minilm", "--mem-batch", "1024"]
        + ["--mem-chunk-sizes", "0", "1048576"],
    ),
    # MW's pair stage vs cross-entropy: the goal's sizes (1,024 and 4,096) and one small batch, one thread
    "mw_pairs": (
        "bench_mw_pairs.py",
        [
            "--batches",
            "256",
            "1024",
            "4096",
            "--hard",
            "0",
            "--pairwise-max",
            "256",
            "--repeats",
            "2",
            "--threads",
            "1",
        ],
        ["--threads", "1"],
    ),
    "search": (
        "bench_search.py",
        ["--data", str(DATA / "scifact"), "--repeats", "3"],
        ["--data", str(DATA / "scifact")],
    ),
    # exact search vs plain torch: 300k documents is already 6 corpus chunks (the 1M regime); full: 10k-1M
    "scale": (
        "bench_scale.py",
        ["--sizes", "300000", "--repeats", "3"],
        ["--sizes", "10000", "100000", "1000000", "--repeats", "3"],
    ),
    "kappa": ("bench_kappa.py", ["--n-pairs", "800", "--bootstrap", "20"], []),
    "revela": (
        "bench_revela.py",
        ["--arch", "tiny", "--repeats", "3"],
        ["--arch", "smollm2", "--batch", "8", "--length", "128", "--repeats", "3"],
    ),
    # --help and usage / path errors of every command vs importing sentence-transformers (fresh interpreters)
    "cli_startup": ("bench_cli_startup.py", ["--repeats", "3"], ["--repeats", "5"]),
}

_KEEP = re.compile(r"ratio|goal|≤|missed|\bmet\b|\bok\b", re.IGNORECASE)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", nargs="+", choices=sorted(BENCHMARKS), help="run only these benchmarks")
    p.add_argument("--full", action="store_true", help="use the sizes named in the issues (slow on a CPU)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=str(ROOT / "runs" / "benchmarks"))
    p.add_argument("--compare-dir", default=str(ROOT / "runs" / "compare"))
    args = p.parse_args(argv)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary: list[tuple[str, str, list[str]]] = []
    for name in args.only or list(BENCHMARKS):
        script, reduced, full = BENCHMARKS[name]
        path = HERE / script
        if not path.is_file():
            summary.append((name, "missing", [f"{script} not found"]))
            continue
        extra = full if args.full else reduced
        if "--threads" not in extra and "threads" in path.read_text():
            extra = [*extra, "--threads", str(args.threads)]
        cmd = [sys.executable, str(path), *extra]
        print(f"\n=== {name}: {' '.join(cmd[1:])}", flush=True)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        seconds = time.perf_counter() - t0
        log = out / f"{name}.log"
        log.write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
        print(proc.stdout[-4000:], flush=True)
        status = "ok" if proc.returncode == 0 else f"failed (rc={proc.returncode}, see {log})"
        lines = [ln.strip() for ln in proc.stdout.splitlines() if _KEEP.search(ln)][-12:]
        summary.append((name, f"{status}, {seconds:.0f} s", lines))

    print("\n" + "=" * 100 + "\nBenchmark summary (ours vs baseline, same run)\n" + "=" * 100)
    for name, status, lines in summary:
        print(f"{name:8s} [{status}]")
        for line in lines:
            print(f"         {line}")
    results = Path(args.compare_dir) / "results.md"
    if results.is_file():
        print("\nQuality table (" + str(results) + "):\n")
        print(results.read_text())
    else:
        print(f"\nNo quality table yet: run `st-magnitude compare --quick --output {args.compare_dir}`.")
    return 0 if all(s.startswith("ok") for _, s, _ in summary) else 1


if __name__ == "__main__":
    sys.exit(main())
