"""``st-magnitude replicate``: run a paper claim with seeds and confidence intervals, list claims, build the report."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from st_magnitude.cli._args import add_option, add_options, values

__all__ = ["COMMITTED_REPORT", "DEFAULT_RESULTS", "add_arguments", "run"]

#: The committed summaries, which --list and --report read when --results is left out (nothing writes there unasked).
DEFAULT_RESULTS = "docs/replication/results"
#: The committed page, rebuilt with ``--report docs/replication.md`` (named in help texts; never a default).
COMMITTED_REPORT = "docs/replication.md"
#: Where a run writes its full result JSON (ignored by git).
DEFAULT_OUTPUT = "runs/replication"

DESCRIPTION = (
    "Run one paper claim with N seeds and write its full result JSON to --output (and a summary to --results DIR "
    "only when asked); --list names the claims with their recorded cost; --report PAGE writes the report page PAGE "
    f"and replication/forest.png beside it from the summaries in --results (the committed page: --report "
    f"{COMMITTED_REPORT} --results {DEFAULT_RESULTS})."
)


#: What this command writes, for the CLI's one cleanup rule on failure (:mod:`st_magnitude.cli`).
OUTPUTS = {"output": "resumable", "results": "resumable", "report": "file"}
#: What this command reads besides ``model`` (option dest -> its name): no output may be or lie inside one.
INPUTS = {"redecide": "--redecide", "merge": "--merge"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("claim", nargs="?", help="claim id (see --list)")
    p.add_argument(
        "--list", action="store_true", help="list the claims with the seeds, CPU-seconds and wall time recorded"
    )
    p.add_argument(
        "--report",
        default=None,
        metavar="PAGE",
        help="write the report page PAGE (and replication/forest.png beside it) from the summaries in --results; "
        f"the committed page is {COMMITTED_REPORT}",
    )
    p.add_argument(
        "--profile", default="cpu", choices=("cpu", "gpu"), help="cpu (small) or gpu (paper-faithful); default: cpu"
    )
    p.add_argument("--seeds", type=int, default=5, help="number of training seeds (default: 5)")
    p.add_argument("--first-seed", type=int, default=0)
    add_options(p, "--data-root")
    add_option(
        p,
        "--output",
        default=DEFAULT_OUTPUT,
        help=f"folder for the full result JSON with the per-item scores (default {DEFAULT_OUTPUT})",
    )
    p.add_argument(
        "--results",
        default=None,
        metavar="DIR",
        help="folder for the small summary JSON the report is built from; a run writes one only when this is given "
        f"(the committed ones: {DEFAULT_RESULTS}). --report and --list read {DEFAULT_RESULTS} when it is left out",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="replace a summary in --results that holds more seeds than this run (refused otherwise)",
    )
    p.add_argument("--model", default=None, help="override the profile's base model (folder or alias)")
    add_options(p, "--device")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a profile setting")
    p.add_argument(
        "--redecide",
        default=None,
        metavar="FULL_JSON",
        help="recompute the comparisons and verdict of a finished run from its full JSON (no training)",
    )
    p.add_argument(
        "--merge",
        nargs="+",
        default=None,
        metavar="FULL_JSON",
        help="merge the full JSONs of one run made in parts (disjoint seeds, e.g. one process per seed with "
        "--first-seed K --seeds 1) into one result in --output, decided by the claim's rule (no training)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="run the profile's exact code path at the claim's tiny sizes (seconds on CPU); writes no summary",
    )
    p.add_argument(
        "--tag",
        default=None,
        type=_tag,
        help="name a variant run (kept beside the main result, not replacing it): letters, digits, '-', '_', '.'",
    )


def _check_claim(text: str) -> None:
    """The claim id is one of the registry's (checked before torch is imported for the run)."""
    from st_magnitude.lab.replication.claims import CLAIM_MODULES

    if text not in CLAIM_MODULES:
        raise ValueError(f"unknown claim {text!r}; valid claims: {', '.join(CLAIM_MODULES)}")


def _tag(text: str) -> str:
    """``--tag``: the rule of every name that becomes part of a file name (:func:`~st_magnitude._trust.check_name`,
    also applied to the names a part file gives)."""
    from st_magnitude._trust import check_name

    try:
        return check_name(text, "--tag")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


#: What this command reads, checked by the CLI before :func:`run` imports anything heavy (:mod:`st_magnitude.cli`).
ARG_CHECKS = {"claim": _check_claim}


def run(args: argparse.Namespace) -> int:
    from st_magnitude.lab.replication.claims import CLAIM_MODULES, list_claims

    results = args.results
    if args.list:
        from st_magnitude.lab.replication.report import recorded_costs

        costs = recorded_costs(results or DEFAULT_RESULTS)
        print(f"recorded cost: from {results or DEFAULT_RESULTS}")
        for c in list_claims():
            print(f"{c.id:14s} paper {c.paper}  {c.title}")
            for profile in c.profiles:
                print(f"{'':14s}   {profile}: {costs.get((c.id, profile), 'not yet recorded')}")
        return 0
    if args.report:
        from st_magnitude.lab.replication.report import write_report

        page = write_report(results or DEFAULT_RESULTS, args.report)
        print(f"wrote {page} and {page.parent / 'replication' / 'forest.png'}")
        return 0
    if args.redecide:
        from st_magnitude.lab.replication.runner import redecide

        print(f"deciding {args.redecide} again" + (f"; summary to {results}" if results else ""))
        record = redecide(args.redecide, results)
        print(f"{record['claim']} ({record['profile']}): {record['decision'].get('ours', '')}")
        print(f"  verdict: {record['verdict']}")
        print(f"  wrote {' and '.join(record['written'])}")
        return 0
    if args.merge:
        from st_magnitude.lab.replication.merge import merge_runs

        if args.claim:
            raise ValueError(f"--merge takes no claim ({args.claim!r}): each part's file names its claim")

        record = merge_runs(args.merge, args.output, results, force=args.force)  # failed: no empty folder (OUTPUTS)
        r = record["resources"]
        print(
            f"{record['claim']} ({record['profile']}): merged {len(args.merge)} parts, "
            f"{_count(len(record['seeds']), 'seed')} {[s['seed'] for s in record['seeds']]}, "
            + (f"{r['cpu_seconds']:.0f} CPU-s" if r["cpu_seconds"] is not None else "CPU-s not recorded")
        )
        print(f"  ours: {record['decision'].get('ours', '')}")
        print(f"  verdict: {record['verdict']}")
        print(f"  wrote {record['full_result']}" + (f" and {record['summary_result']}" if results else ""))
        return 0
    if not args.claim:
        raise ValueError(f"name a claim (valid: {', '.join(CLAIM_MODULES)}), or use --list / --report")
    if args.dry_run and results:
        raise ValueError("a dry run writes no summary: leave out --results (its full result goes to --output)")
    from st_magnitude.lab.replication.overrides import parse_set
    from st_magnitude.lab.replication.runner import run_claim

    overrides = parse_set(args.set)  # checked against the profile's settings before the run starts

    command = " ".join(shlex.quote(a) for a in ["st-magnitude", "replicate", *_argv_after("replicate")])
    where = f"full result to {Path(args.output).resolve()}/"
    where += f", summary to {Path(results).resolve()}/" if results else " (no summary: --results DIR writes one)"
    print(f"replicate {args.claim} ({args.profile}, {_count(args.seeds, 'seed')}): writing the {where}", flush=True)
    record = run_claim(
        args.claim,
        results=results,
        data=args.data_root,
        out=args.output,
        command=command,
        overrides=overrides,
        **values(args, "profile", "seeds", "first_seed", "device", "model", "tag", "force", "dry_run"),
    )
    r = record["resources"]
    print(
        f"{record['claim']} ({record['profile']}, {_count(len(record['seeds']), 'seed')}, "
        f"{r['cpu_seconds']:.0f} CPU-s, {r['wall_seconds']:.0f} s wall):"
    )
    print(f"  ours: {record['decision'].get('ours', '')}")
    print(f"  verdict: {record['verdict']}")
    print(f"  wrote {record['full_result']}")
    print(f"  wrote {record['summary_result']}" if results else "  no summary written (no --results)")
    return 0


def _count(n: int, noun: str) -> str:
    """``1 seed``, ``3 seeds``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _argv_after(word: str) -> list[str]:
    argv = sys.argv[1:]
    return argv[argv.index(word) + 1 :] if word in argv else argv
