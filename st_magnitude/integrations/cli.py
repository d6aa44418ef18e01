"""``st-magnitude evaluate`` and ``st-magnitude mteb run`` (see docs/evaluation.md)."""

from __future__ import annotations

import json
import logging
import os

logger = logging.getLogger(__name__)


def add_subcommands(subparsers) -> None:
    from st_magnitude.similarity import SIMILARITY_NAMES

    p = subparsers.add_parser(
        "evaluate",
        help="retrieval evaluation with the model's own roles: nDCG@10, Recall@100, MRR@10, pooled AUC per dataset",
        description=(
            "Encode queries with encode_query and documents with encode_document, score with the model's own "
            "similarity, exact search, metrics from pytrec_eval (via BEIR). Pooled AUC follows paper 001 §6 "
            "(all positives + 500 hardest negatives per query, pooled)."
        ),
    )
    p.add_argument("model", help="SentenceTransformer folder (or hub id, online only)")
    p.add_argument("--data", nargs="+", required=True, metavar="BEIR_DIR", help="local BEIR folder(s)")
    p.add_argument("--split", default="test", help="qrels split (default: test)")
    p.add_argument(
        "--max-corpus",
        type=int,
        default=None,
        metavar="N",
        help="NanoBEIR-style subsample: all judged docs of the kept queries + seeded distractors up to N",
    )
    p.add_argument("--max-queries", type=int, default=None, metavar="N", help="seeded subsample of the queries")
    p.add_argument("--seed", type=int, default=42, help="subsampling seed (default 42)")
    p.add_argument(
        "--similarity",
        choices=[s for s in SIMILARITY_NAMES if s != "learnable"],
        default=None,
        help="score the raw embeddings with this similarity instead of the model's own",
    )
    p.add_argument("--require-roles", action="store_true", help="fail if the model has no query/document roles")
    p.add_argument("--max-seq-length", type=int, default=None, help="cap the tokens per input")
    p.add_argument(
        "--on-missing",
        choices=["raise", "drop"],
        default="raise",
        help="judged ids missing from the corpus/queries: fail (default) or drop them",
    )
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the rows as JSON")
    p.set_defaults(func=_run_evaluate)

    m = subparsers.add_parser(
        "mteb",
        help="run mteb's own CLI with a local model folder and local BEIR folders as tasks",
        description="mteb CLI shim: registers local models and BEIR folders, then runs `mteb` itself.",
    )
    msub = m.add_subparsers(dest="mteb_command", metavar="MTEB_COMMAND")
    r = msub.add_parser(
        "run",
        help="mteb run -m PATH -t TASK_OR_BEIR_DIR ... (mteb's normal results files)",
        description=(
            "Everything mteb's `run` accepts works (e.g. --output-folder, --overwrite-strategy, --batch-size); "
            "-m may be a local model folder and -t a local BEIR folder. Extra options of ours: "
            "--split, --max-corpus, --max-queries, --seed (for local folders)."
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
    r.add_argument("--output-folder", default="results", help="mteb results folder (default: results)")
    r.add_argument("--batch-size", type=int, default=None)
    r.add_argument(
        "--overwrite-strategy", default=None, help="mteb overwrite strategy (always, never, only-missing, only-cache)"
    )
    r.add_argument("--prediction-folder", default=None)
    r.add_argument("--device", type=int, default=None, help="CUDA device index (mteb's own flag; default auto)")
    r.add_argument("--verbosity", type=int, default=None, help="mteb verbosity 0-3")
    r.add_argument("--split", default="test", help="qrels split of local BEIR folders")
    r.add_argument("--max-corpus", type=int, default=None, help="NanoBEIR-style subsample of local folders")
    r.add_argument("--max-queries", type=int, default=None)
    r.add_argument("--seed", type=int, default=42)
    r.set_defaults(func=_run_mteb)
    m.set_defaults(func=lambda args: (m.print_help(), 2)[1])


def _run_evaluate(args) -> int:
    from st_magnitude.integrations.evaluate import evaluate_folders, format_table

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    rows = evaluate_folders(
        args.model,
        args.data,
        split=args.split,
        max_corpus=args.max_corpus,
        max_queries=args.max_queries,
        seed=args.seed,
        similarity=args.similarity,
        roles_required=args.require_roles,
        max_seq_length=args.max_seq_length,
        on_missing=args.on_missing,
        batch_size=args.batch_size,
    )
    print(f"model: {args.model}")
    print(format_table(rows))
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=2)
    return 0


def _run_mteb(args) -> int:
    from st_magnitude.integrations.mteb import mteb_cli

    if not args.tasks and not args.benchmarks:
        raise ValueError("mteb run needs -t TASK_OR_BEIR_DIR ... (or -b BENCHMARK)")
    argv = ["run", "-m", args.model, "--output-folder", args.output_folder]
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
    mteb_cli(argv, split=args.split, max_corpus=args.max_corpus, max_queries=args.max_queries, seed=args.seed)
    print(f"mteb results written under {os.path.abspath(args.output_folder)}")
    return 0
