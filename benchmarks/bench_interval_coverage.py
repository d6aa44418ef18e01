"""Coverage of the replication interval under a crossed seed × item model: the table in ``docs/replication.md``.

Simulates ``reps`` matrices of paired differences ``d[s, q] = σ_s a_s + σ_q b_q + σ_e e_sq`` (true difference 0;
``a``, ``b``, ``e`` standard normal, or Student-t with 3 df scaled to unit variance for ``--heavy``) for each
regime (the share of Var(mean d) from seeds, items and their interaction), number of seeds and number of items, and
counts how often each 95 % interval contains 0:

- ``before``: the rule ``compare_arms`` used until the variance components replaced it — the union of a t-interval
  over the per-seed means and a paired percentile bootstrap (``--n-boot`` resamples) of the seed-averaged per-item
  difference (kept here and in ``tests/evaluation/test_interval_coverage.py`` only, to show why it was replaced);
- ``after``: :func:`st_magnitude.evaluation.stats.crossed_intervals` (what ``compare_arms`` reports and judges).

    python benchmarks/bench_interval_coverage.py --write docs/replication/interval_coverage.json

then ``st-magnitude replicate --report`` puts the table on the page.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats as sps

from st_magnitude._trust.write import write_json_atomic
from st_magnitude.evaluation.stats import crossed_intervals

#: regime → share of Var(mean d) from (seeds, items, seed × item)
REGIMES = {
    "items dominate": (0.05, 0.9, 0.05),
    "seeds dominate": (0.9, 0.05, 0.05),
    "both": (0.45, 0.45, 0.1),
    "interaction dominates": (0.1, 0.1, 0.8),
}


def simulate(rng: np.random.Generator, reps: int, k: int, n: int, shares, heavy: bool = False) -> np.ndarray:
    """``reps × k × n`` paired differences with true mean 0 and Var(mean) = 1, split by ``shares``."""
    f_s, f_q, f_e = shares

    def draw(shape):
        return rng.standard_t(3, shape) / np.sqrt(3.0) if heavy else rng.standard_normal(shape)

    return (
        np.sqrt(f_s * k) * draw((reps, k, 1))
        + np.sqrt(f_q * n) * draw((reps, 1, n))
        + np.sqrt(f_e * k * n) * draw((reps, k, n))
    )


def old_union(d: np.ndarray, rng: np.random.Generator, n_boot: int) -> tuple[np.ndarray, np.ndarray]:
    """The replaced rule: union of the seed t-interval and the item bootstrap of the seed-averaged difference."""
    _, k, n = d.shape
    m = d.mean(axis=(-2, -1))
    half = sps.t.ppf(0.975, k - 1) * d.mean(axis=-1).std(axis=-1, ddof=1) / np.sqrt(k)
    pooled = d.mean(axis=-2)
    idx = rng.integers(0, n, size=(n_boot, n))
    lo, hi = np.empty_like(m), np.empty_like(m)
    for c in range(0, len(m), 50):
        boot = pooled[c : c + 50][:, idx].mean(axis=-1)
        lo[c : c + 50], hi[c : c + 50] = np.quantile(boot, [0.025, 0.975], axis=1)
    return np.minimum(m - half, lo), np.maximum(m + half, hi)


def coverage_table(reps: int, seeds: list[int], items: list[int], n_boot: int, heavy: bool, rng_seed: int) -> list:
    rows = []
    for regime, shares in REGIMES.items():
        for n in items:
            row = {"regime": regime, "shares": list(shares), "items": n, "heavy_tailed": heavy, "cells": {}}
            for k in seeds:
                rng = np.random.default_rng([rng_seed, k, n, list(REGIMES).index(regime), int(heavy)])
                d = simulate(rng, reps, k, n, shares, heavy)
                lo0, hi0 = old_union(d, rng, n_boot)
                _, lo1, hi1 = crossed_intervals(d)
                row["cells"][str(k)] = {
                    "before": float(np.mean((lo0 <= 0) & (hi0 >= 0))),
                    "after": float(np.mean((lo1 <= 0) & (hi1 >= 0))),
                    "width_before": float(np.median(hi0 - lo0)),
                    "width_after": float(np.median(hi1 - lo1)),
                }
            rows.append(row)
            print(regime, n, {k: (c["before"], c["after"]) for k, c in row["cells"].items()}, flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=4000, help="simulated replicates per cell")
    p.add_argument("--seeds", default="3,5,10", help="numbers of seeds (comma-separated)")
    p.add_argument("--items", default="30,100", help="numbers of items (comma-separated)")
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples of the replaced rule")
    p.add_argument("--rng-seed", type=int, default=0)
    p.add_argument("--write", default=None, help="write the table as JSON here (the report reads it)")
    args = p.parse_args(argv)
    seeds = [int(x) for x in args.seeds.split(",")]
    items = [int(x) for x in args.items.split(",")]
    t0, c0 = time.perf_counter(), time.process_time()
    rows = coverage_table(args.reps, seeds, items, args.n_boot, False, args.rng_seed)
    rows += coverage_table(args.reps, seeds, items, args.n_boot, True, args.rng_seed)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out = {
        "command": "python benchmarks/bench_interval_coverage.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "reps": args.reps,
        "n_boot": args.n_boot,
        "rng_seed": args.rng_seed,
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 1),
        "wall_seconds": round(time.perf_counter() - t0, 1),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, Python {platform.python_version()}",
        "rows": rows,
    }
    print(f"cpu {time.process_time() - c0:.1f} s, wall {out['wall_seconds']} s")
    if args.write:
        write_json_atomic(Path(args.write), out, indent=1)
        print(f"wrote {args.write}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
