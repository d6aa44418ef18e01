"""``st-magnitude mteb run -m MODEL -t TASK_OR_BEIR_DIR...``: mteb's own CLI with local models and BEIR folders
(see docs/evaluation.md)."""

from __future__ import annotations

import argparse
import os

from st_magnitude.cli._args import (
    SUBSAMPLE,
    add_option,
    add_options,
    check_mteb_model,
    check_output_dir,
    check_splits,
    check_task_or_folder,
    values,
)

DESCRIPTION = "mteb CLI shim: registers local models and BEIR folders, then runs `mteb` itself."


#: What this command writes, for the CLI's one cleanup rule on failure (:mod:`st_magnitude.cli`).
OUTPUTS = {"output": "folder", "prediction_folder": "folder"}
#: What this command reads besides ``model`` (option dest -> its name): no output may be or lie inside one.
INPUTS = {"tasks": "--tasks"}


def add_arguments(m: argparse.ArgumentParser) -> None:
    msub = m.add_subparsers(dest="mteb_command", metavar="MTEB_COMMAND")
    r = msub.add_parser(
        "run",
        help="mteb run -m PATH -t TASK_OR_BEIR_DIR ... (mteb's normal results files)",
        description=(
            "mteb's `run` options listed here are passed on (-o/--output as mteb's --output-folder); "
            "-m may be a local model folder and -t a local BEIR folder. Extra options of ours: "
            "--split, --max-corpus, --max-queries, --seed, --on-missing (for local folders), --trust-remote-code."
        ),
    )
    r.add_argument("-m", "--model", required=True, help="local model folder or an mteb/hub model name")
    r.add_argument(
        "-t",
        "--tasks",
        nargs="+",
        default=None,
        metavar="TASK_OR_BEIR_DIR",
        help="mteb task names (downloaded: online only) and/or local BEIR folders",
    )
    r.add_argument("-b", "--benchmarks", nargs="+", default=None, help="mteb benchmark names (online only)")
    add_option(r, "--output", default="results", help="mteb results folder (mteb's --output-folder; default: results)")
    add_option(r, "--batch-size", help="encoding batch size (default: mteb's)")
    r.add_argument(
        "--overwrite-strategy", default=None, help="mteb overwrite strategy (always, never, only-missing, only-cache)"
    )
    r.add_argument("--prediction-folder", default=None, metavar="DIR", help="also save mteb's predictions here")
    r.add_argument("--device", type=int, default=None, help="CUDA device index (mteb's own flag; default auto)")
    r.add_argument("--verbosity", type=int, default=None, help="mteb verbosity 0-3")
    add_option(r, "--split", help="qrels split of local BEIR folders")
    add_option(r, "--max-corpus")
    add_options(r, "--max-queries", "--seed")
    add_option(
        r, "--on-missing", help="judged ids missing from a local folder's corpus/queries: fail (default) or drop them"
    )
    add_options(r, "--trust-remote-code")
    r.set_defaults(func=_run)
    m.set_defaults(func=lambda args: (m.print_help(), 2)[1])


#: What this command reads, checked by the CLI before :func:`run` imports anything heavy (:mod:`st_magnitude.cli`).
ARG_CHECKS = {"model": check_mteb_model, "tasks": check_task_or_folder}


def _run(args: argparse.Namespace) -> int:
    from st_magnitude.evaluation.mteb import mteb_cli

    if not args.tasks and not args.benchmarks:
        raise ValueError("mteb run needs -t TASK_OR_BEIR_DIR ... (or -b BENCHMARK)")
    check_splits([t for t in args.tasks or () if os.path.isdir(t)], args.split)  # before mteb is imported
    check_output_dir(args.output, "--output")
    if args.prediction_folder:
        check_output_dir(args.prediction_folder, "--prediction-folder")
    argv = ["run", "-m", args.model, "--output-folder", args.output]
    if args.tasks:
        argv += ["-t", *args.tasks]
    if args.benchmarks:
        argv += ["-b", *args.benchmarks]
    for flag, value in (
        ("--batch-size", args.batch_size),
        ("--overwrite-strategy", args.overwrite_strategy),
        ("--prediction-folder", args.prediction_folder),
        ("--device", args.device),
        ("--verbosity", args.verbosity),
    ):
        if value is not None:
            argv += [flag, str(value)]
    from st_magnitude.evaluation.runner import format_table

    print(f"mteb run: results go to {os.path.abspath(args.output)}", flush=True)
    rows = mteb_cli(  # a failure takes back the folders it created (OUTPUTS)
        argv,
        on_loaded=lambda data: print(data.describe_kept(), flush=True),  # before mteb loads the model
        **values(args, *SUBSAMPLE, "on_missing", "trust_remote_code"),
    )
    if rows:
        print(f"model: {args.model}")
        print(format_table(rows))
    print(f"mteb results written under {os.path.abspath(args.output)}")
    return 0
