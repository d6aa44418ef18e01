"""``st-magnitude evaluate`` and ``st-magnitude mteb run`` (see docs/evaluation.md)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
from pathlib import Path

from st_magnitude._cli_args import (
    check_output_dir,
    check_output_file,
    positive_int,
    removed_on_failure,
)

logger = logging.getLogger(__name__)

TRUST_HELP = (
    "allow the model to run code outside sentence-transformers and st-magnitude (classes named in modules.json, "
    "a config auto_map); off by default, st-magnitude's own modules are always allowed"
)

#: What each use of a similarity name needs, and why the others are refused there.
_PURPOSES = {
    "carry": "a model must carry it (a per-role rescaling: apply_similarity, convert, compare --variants)",
    "rescore": "the raw embeddings are rescored with a fixed per-role rescaling (evaluate --similarity)",
    "any": "any similarity of the package (losses)",
}


def similarity_names(purpose: str = "carry") -> tuple[str, ...]:
    """The similarity names a command accepts — the one place the CLI takes them from.

    All three are queries of the one similarity registry (:func:`st_magnitude.similarity.similarity_names`).
    ``"carry"``: what a model can carry;
    ``"rescore"``: those with fixed γ (``evaluate --similarity``: learnable has no γ of its own);
    ``"any"``: every registered name (``tn`` included).
    """
    from st_magnitude import _similarity_names as registry  # torch-free (re-exported by st_magnitude.similarity)

    if purpose == "carry":
        return registry.similarity_names(carriable=True)
    if purpose == "rescore":
        return registry.similarity_names(fixed_gammas=True)
    if purpose == "any":
        return registry.similarity_names()
    raise ValueError(f"unknown purpose {purpose!r}; expected one of {sorted(_PURPOSES)}")


def similarity_arg(purpose: str = "carry"):
    """An ``argparse`` type: a canonical similarity name valid for ``purpose``, else a one-line usage error."""
    names = similarity_names(purpose)

    def parse(text: str) -> str:
        from st_magnitude._similarity_names import validate_similarity_name

        try:
            name = validate_similarity_name(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"unknown similarity {text!r}. Valid names: {', '.join(names)}") from None
        if name not in names:
            why = {
                "tn": "sim_TN is not a per-role rescaling: no model can carry it and raw embeddings cannot be "
                "rescored with it (use it as a loss similarity)",
                "learnable": "learnable has no fixed γ; evaluate the learnable model itself, without --similarity",
            }.get(name, f"here {_PURPOSES[purpose]}")
            raise argparse.ArgumentTypeError(f"{name!r} cannot be used here: {why}. Valid names: {', '.join(names)}")
        return name

    parse.__name__ = "similarity"
    return parse


def add_subcommands(subparsers) -> None:
    p = subparsers.add_parser(
        "evaluate",
        help="retrieval evaluation with the model's own roles: nDCG@10, Recall@100, MRR@10, pooled AUC per dataset",
        description=(
            "Encode queries with encode_query and documents with encode_document, score with the model's own "
            "similarity, exact search, metrics from pytrec_eval (via BEIR). Pooled AUC follows paper 001 §5.1 "
            "(all positives + 500 hardest negatives per query, pooled)."
        ),
    )
    p.add_argument("model", help="SentenceTransformer folder (or hub id, online only)")
    p.add_argument("--data", nargs="+", required=True, metavar="BEIR_DIR", help="local BEIR folder(s)")
    p.add_argument("--split", default="test", help="qrels split (default: test)")
    p.add_argument(
        "--max-corpus",
        type=positive_int,
        default=None,
        metavar="N",
        help="NanoBEIR-style subsample: all judged docs of the kept queries + seeded distractors up to N",
    )
    p.add_argument(
        "--max-queries", type=positive_int, default=None, metavar="N", help="seeded subsample of the queries"
    )
    p.add_argument("--seed", type=int, default=42, help="subsampling seed (default 42)")
    p.add_argument(
        "--similarity",
        type=similarity_arg("rescore"),
        default=None,
        metavar="{" + ",".join(similarity_names("rescore")) + "}",
        help="score the raw embeddings with this similarity instead of the model's own",
    )
    p.add_argument("--require-roles", action="store_true", help="fail if the model has no query/document roles")
    p.add_argument("--max-seq-length", type=positive_int, default=None, help="cap the tokens per input")
    p.add_argument(
        "--on-missing",
        choices=["raise", "drop"],
        default="raise",
        help="judged ids missing from the corpus/queries: fail (default) or drop them",
    )
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the rows as JSON")
    p.add_argument("--trust-remote-code", action="store_true", help=TRUST_HELP)
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
    r.add_argument("--output-folder", default="results", help="mteb results folder (default: results)")
    r.add_argument("--batch-size", type=positive_int, default=None)
    r.add_argument(
        "--overwrite-strategy", default=None, help="mteb overwrite strategy (always, never, only-missing, only-cache)"
    )
    r.add_argument("--prediction-folder", default=None)
    r.add_argument("--device", type=int, default=None, help="CUDA device index (mteb's own flag; default auto)")
    r.add_argument("--verbosity", type=int, default=None, help="mteb verbosity 0-3")
    r.add_argument("--split", default="test", help="qrels split of local BEIR folders")
    r.add_argument("--max-corpus", type=positive_int, default=None, help="NanoBEIR-style subsample of local folders")
    r.add_argument("--max-queries", type=positive_int, default=None)
    r.add_argument("--seed", type=int, default=42)
    r.add_argument(
        "--on-missing",
        choices=["raise", "drop"],
        default="raise",
        help="judged ids missing from a local folder's corpus/queries: fail (default) or drop them",
    )
    r.add_argument("--trust-remote-code", action="store_true", help=TRUST_HELP)
    r.set_defaults(func=_run_mteb)
    m.set_defaults(func=lambda args: (m.print_help(), 2)[1])


def _run_evaluate(args) -> int:
    from st_magnitude.integrations.evaluate import evaluate_folders, format_table

    if args.json:
        check_output_file(args.json, "--json")  # before the evaluation, not after it
    if not args.trust_remote_code and Path(args.model).is_dir():
        from st_magnitude.integrations.models import check_model_code

        check_model_code(args.model)  # refuse foreign code before reading any data
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
        trust_remote_code=args.trust_remote_code,
    )
    print(f"model: {args.model}")
    print(format_table(rows))
    if args.json:
        _write_json_atomic(args.json, rows)
    return 0


def _write_json_atomic(path: str, obj) -> None:
    target = Path(path).absolute()
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=2)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _run_mteb(args) -> int:
    from st_magnitude.integrations.mteb import mteb_cli

    if not args.tasks and not args.benchmarks:
        raise ValueError("mteb run needs -t TASK_OR_BEIR_DIR ... (or -b BENCHMARK)")
    check_output_dir(args.output_folder, "--output-folder")
    if args.prediction_folder:
        check_output_dir(args.prediction_folder, "--prediction-folder")
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
    with removed_on_failure(args.output_folder), removed_on_failure(args.prediction_folder):
        mteb_cli(
            argv,
            split=args.split,
            max_corpus=args.max_corpus,
            max_queries=args.max_queries,
            seed=args.seed,
            on_missing=args.on_missing,
            trust_remote_code=args.trust_remote_code,
        )
    print(f"mteb results written under {os.path.abspath(args.output_folder)}")
    return 0
