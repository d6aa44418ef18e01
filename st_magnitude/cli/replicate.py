"""``st-magnitude replicate``: run a paper claim with seeds and confidence intervals, list claims, build the report."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from st_magnitude.cli._args import add_options, values

__all__ = ["DEFAULT_REPORT", "DEFAULT_RESULTS", "add_arguments", "run"]

DEFAULT_RESULTS = "docs/replication/results"
DEFAULT_REPORT = "docs/replication.md"


DESCRIPTION = (
    "Run one paper claim with N seeds and write its result JSON; --list names the claims; "
    "--report regenerates docs/replication.md from the result JSONs."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("claim", nargs="?", help="claim id (see --list)")
    p.add_argument("--list", action="store_true", help="list the claims and exit")
    p.add_argument("--report", action="store_true", help=f"regenerate {DEFAULT_REPORT} from the result JSONs")
    p.add_argument(
        "--profile", default="cpu", choices=("cpu", "gpu"), help="cpu (small) or gpu (paper-faithful); default: cpu"
    )
    p.add_argument("--seeds", type=int, default=3, help="number of training seeds (default: 3)")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--data", default=None, help="data folder holding beir/ and sts/ (default $ST_MAGNITUDE_DATA)")
    p.add_argument("--out", default="runs/replication", help="folder for the full result JSON (per-item scores)")
    p.add_argument(
        "--results",
        default=None,
        help=f"folder for the small summary JSON the report is built from (default {DEFAULT_RESULTS} when run "
        "from the repository root, else none)",
    )
    p.add_argument("--report-path", default=DEFAULT_REPORT, help="where --report writes")
    p.add_argument("--model", default=None, help="override the profile's base model (folder or alias)")
    add_options(p, "--device")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a profile setting")
    p.add_argument(
        "--redecide",
        default=None,
        metavar="FULL_JSON",
        help="recompute the comparisons and verdict of a finished run from its full JSON (no training)",
    )
    p.add_argument("--tag", default=None, help="name a variant run (kept beside the main result, not replacing it)")


def run(args: argparse.Namespace) -> int:
    from st_magnitude.replication.claims import CLAIM_MODULES, list_claims

    if args.list:
        for c in list_claims():
            budgets = "; ".join(f"{k}: {v}" for k, v in c.budget.items())
            print(f"{c.id:14s} paper {c.paper}  {c.title}  [{budgets}]")
        return 0
    results = args.results
    if results is None and Path("mkdocs.yml").is_file():
        results = DEFAULT_RESULTS
    if args.report:
        from st_magnitude.replication.report import write_report

        path = write_report(results or DEFAULT_RESULTS, args.report_path)
        print(f"wrote {path}")
        return 0
    if args.redecide:
        from st_magnitude.replication.runner import redecide

        record = redecide(args.redecide, results)
        print(f"{record['claim']} ({record['profile']}): {record['decision'].get('ours', '')}")
        print(f"  verdict: {record['verdict']}")
        return 0
    if not args.claim:
        raise ValueError(f"name a claim (valid: {', '.join(CLAIM_MODULES)}), or use --list / --report")
    overrides = {}
    for item in args.set:
        if "=" not in item:
            raise ValueError(f"--set takes KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        try:
            overrides[k] = json.loads(v)
        except json.JSONDecodeError:
            overrides[k] = v
    from st_magnitude.replication.runner import run_claim

    command = " ".join(shlex.quote(a) for a in ["st-magnitude", "replicate", *_argv_after("replicate")])
    where = f"{args.out}" + (f" (summary in {results})" if results else "")
    print(f"replicate {args.claim} ({args.profile}, {_count(args.seeds, 'seed')}): writing to {where}", flush=True)
    record = run_claim(
        args.claim,
        results=results,
        command=command,
        overrides=overrides,
        **values(args, "profile", "seeds", "first_seed", "data", "out", "device", "model", "tag"),
    )
    n_seeds = _count(len(record["seeds"]), "seed")
    print(f"{record['claim']} ({record['profile']}, {n_seeds}, {record['wall_seconds']:.0f} s):")
    print(f"  ours: {record['decision'].get('ours', '')}")
    print(f"  verdict: {record['verdict']}")
    print(f"  full result: {record['full_result']}")
    if results:
        name = f"{record['claim']}-{record['profile']}" + (f"-{record['tag']}" if record.get("tag") else "")
        print(f"  summary: {Path(results) / name}.json")
    return 0


def _count(n: int, noun: str) -> str:
    """``1 seed``, ``3 seeds``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _argv_after(word: str) -> list[str]:
    argv = sys.argv[1:]
    return argv[argv.index(word) + 1 :] if word in argv else argv
