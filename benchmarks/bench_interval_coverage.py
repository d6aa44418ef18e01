"""Coverage of the replication interval under a crossed seed × item model: the table in ``docs/replication.md``.

Simulates ``reps`` matrices of paired differences ``d[s, q] = σ_s a_s + σ_q b_q + σ_e e_sq`` (true difference 0)
for each noise kind, regime (the share of Var(mean d) from seeds, items and their interaction), number of seeds and
number of items, and counts how often each 95 % interval contains 0. ``a`` and ``e`` are standard normal (Student-t
with 3 df, scaled to unit variance, for ``heavy``); the item effects ``b`` set the kind:

- ``normal``: standard normal; ``heavy``: Student-t with 3 df;
- ``skewed``: exponential (skewness 2), centred;
- ``zero-inflated``: 0 with probability 0.85, else exponential (skewness 5.3) — most queries gain nothing, a few a
  lot: the shape of per-query nDCG differences on real data.

Two intervals per cell:

- ``before``: the crossed t-interval alone (variance components, Satterthwaite df);
- ``after``: :func:`st_magnitude.evaluation.stats.crossed_intervals` — the same, each end widened to a bootstrap-t
  over items where its tail is longer (what ``compare_arms`` reports and judges).

    python benchmarks/bench_interval_coverage.py --write docs/replication/interval_coverage.json

then ``st-magnitude replicate --report docs/replication.md`` puts the table on the page.
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
from st_magnitude.evaluation.stats import _components, crossed_intervals

#: regime → share of Var(mean d) from (seeds, items, seed × item)
REGIMES = {
    "items dominate": (0.05, 0.9, 0.05),
    "seeds dominate": (0.9, 0.05, 0.05),
    "both": (0.45, 0.45, 0.1),
    "interaction dominates": (0.1, 0.1, 0.8),
}
#: noise kind → the numbers of items it is simulated at by default
KINDS = {"normal": "30,100", "heavy": "30,100", "skewed": "100,300", "zero-inflated": "100,300"}
#: zero-inflated item effects: non-zero with this probability (then exponential): skewness 5.3
ZERO_INFLATED_P = 0.15


def item_effects(rng: np.random.Generator, shape, kind: str) -> np.ndarray:
    """Item effects of ``kind`` with mean 0 and variance 1."""
    if kind == "normal":
        return rng.standard_normal(shape)
    if kind == "heavy":
        return rng.standard_t(3, shape) / np.sqrt(3.0)
    if kind == "skewed":
        return rng.exponential(1.0, shape) - 1.0
    if kind == "zero-inflated":
        p = ZERO_INFLATED_P
        b = (rng.random(shape) < p) * rng.exponential(1.0, shape)
        return (b - p) / np.sqrt(2 * p - p * p)
    raise ValueError(f"unknown noise kind {kind!r}; valid: {', '.join(KINDS)}")


def simulate(rng: np.random.Generator, reps: int, k: int, n: int, shares, kind: str = "normal") -> np.ndarray:
    """``reps × k × n`` paired differences with true mean 0 and Var(mean) = 1, split by ``shares``."""
    f_s, f_q, f_e = shares

    def draw(shape):
        return rng.standard_t(3, shape) / np.sqrt(3.0) if kind == "heavy" else rng.standard_normal(shape)

    return (
        np.sqrt(f_s * k) * draw((reps, k, 1))
        + np.sqrt(f_q * n) * item_effects(rng, (reps, 1, n), kind)
        + np.sqrt(f_e * k * n) * draw((reps, k, n))
    )


def plain_t(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The crossed t-interval without the bootstrap-t widening (the interval before it)."""
    c = _components(d)
    m = d.mean(axis=(-2, -1))
    half = sps.t.ppf(0.975, c["df"]) * c["se"]
    return m - half, m + half


def coverage_table(reps: int, seeds: list[int], kind: str, items: list[int], n_boot: int, rng_seed: int) -> list:
    rows = []
    for regime, shares in REGIMES.items():
        for n in items:
            row = {"kind": kind, "regime": regime, "shares": list(shares), "items": n, "cells": {}}
            for k in seeds:
                rng = np.random.default_rng([rng_seed, k, n, list(REGIMES).index(regime), list(KINDS).index(kind)])
                d = simulate(rng, reps, k, n, shares, kind)
                lo0, hi0 = plain_t(d)
                _, lo1, hi1 = crossed_intervals(d, n_boot=n_boot)
                row["cells"][str(k)] = {
                    "before": float(np.mean((lo0 <= 0) & (hi0 >= 0))),
                    "after": float(np.mean((lo1 <= 0) & (hi1 >= 0))),
                    "width_before": float(np.median(hi0 - lo0)),
                    "width_after": float(np.median(hi1 - lo1)),
                }
            rows.append(row)
            print(kind, regime, n, {k: (c["before"], c["after"]) for k, c in row["cells"].items()}, flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=2000, help="simulated replicates per cell")
    p.add_argument("--seeds", default="3,5,10", help="numbers of seeds (comma-separated)")
    p.add_argument("--kinds", default=",".join(KINDS), help=f"noise kinds (comma-separated; of {', '.join(KINDS)})")
    p.add_argument("--items", default=None, help="numbers of items for every kind (default: per kind, see KINDS)")
    p.add_argument("--n-boot", type=int, default=999, help="bootstrap-t resamples of items")
    p.add_argument("--rng-seed", type=int, default=0)
    p.add_argument("--write", default=None, help="write the table as JSON here (the report reads it)")
    args = p.parse_args(argv)
    seeds = [int(x) for x in args.seeds.split(",")]
    kinds = args.kinds.split(",")
    for kind in kinds:
        if kind not in KINDS:
            p.error(f"unknown noise kind {kind!r}; valid: {', '.join(KINDS)}")
    t0 = time.perf_counter()
    rows = []
    for kind in kinds:
        items = [int(x) for x in (args.items or KINDS[kind]).split(",")]
        rows += coverage_table(args.reps, seeds, kind, items, args.n_boot, args.rng_seed)
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
    print(f"cpu {out['cpu_seconds']} s, wall {out['wall_seconds']} s")
    if args.write:
        write_json_atomic(Path(args.write), out, indent=1)
        print(f"wrote {args.write}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
