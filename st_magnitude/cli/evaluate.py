"""``st-magnitude evaluate MODEL --data BEIR_DIR...``: retrieval metrics with the model's own roles (see
docs/evaluation.md)."""

from __future__ import annotations

import argparse

from st_magnitude._trust.write import write_json_atomic
from st_magnitude.cli._args import (
    SUBSAMPLE,
    add_option,
    add_options,
    check_data_folder,
    check_model_path,
    check_output_file,
    check_splits,
    refuse_foreign_code,
    set_threads,
    similarity_arg,
    similarity_names,
    values,
)

DESCRIPTION = (
    "Encode queries with encode_query and documents with encode_document, score with the model's own "
    "similarity, exact search, metrics from pytrec_eval (via BEIR). Pooled AUC follows paper 001 §5.1 "
    "(all positives + 500 hardest negatives per query, pooled)."
)


#: What this command writes, for the CLI's one cleanup rule on failure (:mod:`st_magnitude.cli`).
OUTPUTS = {"output": "folder"}
#: The file ``-o/--output DIR`` receives: the rows of the table, as JSON.
ROWS_FILE = "evaluation.json"
#: What this command reads besides ``model`` (option dest -> its name): no output may be or lie inside one.
INPUTS = {"data": "--data"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="SentenceTransformer folder (or hub id, online only)")
    add_options(p, "--data", "--split", "--max-corpus", "--max-queries", "--seed")
    p.add_argument(
        "--similarity",
        type=similarity_arg("rescore"),
        default=None,
        metavar="{" + ",".join(similarity_names("rescore")) + "}",
        help="score the raw embeddings with this similarity instead of the model's own",
    )
    p.add_argument("--require-roles", action="store_true", help="fail if the model has no query/document roles")
    add_options(p, "--max-seq-length", "--on-missing")
    add_option(p, "--batch-size", default=32)
    add_options(p, "--threads")
    p.add_argument(
        "--backend",
        choices=("torch", "onnx", "onnx-int8"),  # serving.onnx_model.BACKENDS (not imported for --help)
        default="torch",
        help="encode with the torch model, or with its ONNX export on ONNX Runtime (onnx: f32 fused, the same vectors "
        "to 1e-5; onnx-int8: int8 weights, the ranking moves); the export goes to a temporary folder (default torch)",
    )
    add_option(p, "--output", help=f"also write the rows as JSON to DIR/{ROWS_FILE} (created if missing)")
    add_options(p, "--trust-remote-code")


#: What this command reads, checked by the CLI before :func:`run` imports anything heavy (:mod:`st_magnitude.cli`).
ARG_CHECKS = {"model": check_model_path, "data": check_data_folder}


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from st_magnitude.cli._args import check_output_dir

    rows_file = None if args.output is None else Path(args.output) / ROWS_FILE
    if rows_file is not None:  # before the evaluation, not after it
        check_output_dir(args.output, "--output")
        check_output_file(rows_file, "--output")
    check_splits(args.data, args.split)
    refuse_foreign_code(args)  # before reading any data
    from st_magnitude.evaluation.runner import evaluate_folders, format_table
    from st_magnitude.serving.onnx_model import onnx_encoder

    set_threads(args)
    if rows_file is not None:
        print(f"evaluating {args.model}; the rows will be written to {rows_file}", flush=True)
    rows = evaluate_folders(
        args.model,
        args.data,
        roles_required=args.require_roles,
        encoder=onnx_encoder(args.backend, args.threads),
        on_loaded=lambda data: print(data.describe_kept(), flush=True),  # before the model is loaded
        **values(args, *SUBSAMPLE, "similarity", "max_seq_length", "on_missing", "batch_size", "trust_remote_code"),
    )
    print(f"model: {args.model}")
    print(format_table(rows))
    if rows_file is not None:
        write_json_atomic(rows_file, rows)
        print(f"rows written to {rows_file}")
    return 0
