"""``st-magnitude calibrate MODEL --data BEIR_DIR``: fit score → P(relevant) on labelled queries and save it with the
model (see docs/temperature.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from st_magnitude._trust.write import write_json_atomic
from st_magnitude.cli._args import (
    add_option,
    add_options,
    check_data_folder,
    check_device,
    check_model_path,
    check_output_file,
    check_splits,
    positive_int,
    refuse_foreign_code,
    set_threads,
)

DESCRIPTION = (
    "Fit one monotone map from the model's similarity scores to P(relevant) (isotonic regression or Platt "
    "scaling, scikit-learn) on the pooled scores of a labelled split (every positive + the top --n-negatives "
    "non-positives per query, as for pooled AUC), save it as score_calibration.json in the model folder, and report "
    "ECE and Brier before/after with pooled AUC on held-out queries (--eval-split). Load it with "
    "st_magnitude.evaluation.calibration.calibrated_similarity(model, q, d, MODEL_DIR)."
)


#: What this command writes, for the CLI's one cleanup rule on failure (:mod:`st_magnitude.cli`).
OUTPUTS = {"output": "folder"}
#: The calibration is saved into the model folder by design (the default): ``--output MODEL`` is that default.
MAY_BE_THE_MODEL = ("output",)
#: The report rows (ECE / Brier / pooled AUC per split), written beside ``score_calibration.json``.
REPORT_FILE = "calibration_report.json"
#: What this command reads besides ``model`` (option dest -> its name): no output may be or lie inside one.
INPUTS = {"data": "--data"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="SentenceTransformer folder (the map is saved into it unless --output is given)")
    add_option(p, "--data", help="one local BEIR folder with labelled splits")
    add_option(p, "--split", default="train", help="qrels split the map is fitted on (default: train)")
    p.add_argument(
        "--eval-split", default="test", help="held-out qrels split to report calibration on (default: test)"
    )
    p.add_argument("--method", choices=["isotonic", "platt"], default="isotonic", help="default: isotonic")
    p.add_argument(
        "--n-negatives",
        type=positive_int,
        default=500,
        help="top non-positive documents per query in the pools (default 500, as pooled AUC)",
    )
    add_option(
        p,
        "--output",
        help=f"folder to save score_calibration.json and the report rows ({REPORT_FILE}) to (default: the model "
        "folder)",
    )
    add_options(p, "--max-corpus", "--max-queries", "--seed", "--on-missing", "--max-seq-length")
    add_option(p, "--batch-size", default=32)
    add_options(p, "--device", "--threads")
    add_options(p, "--trust-remote-code")


def _output_folder(args: argparse.Namespace) -> Path:
    if args.output is not None:
        return Path(args.output)
    if not Path(args.model).is_dir():
        raise ValueError(f"{args.model!r} is not a local model folder: pass --output DIR to save the calibration")
    return Path(args.model)


#: What this command reads, checked by the CLI before :func:`run` imports anything heavy (:mod:`st_magnitude.cli`).
ARG_CHECKS = {"model": check_model_path, "data": check_data_folder}


def run(args: argparse.Namespace) -> int:
    from st_magnitude.cli._args import check_output_dir

    if len(args.data) != 1:
        raise ValueError(f"calibrate fits one map on one dataset: pass one --data folder, got {len(args.data)}")
    if args.split == args.eval_split:
        raise ValueError(f"--split and --eval-split are both {args.split!r}: report calibration on held-out queries")
    out = _output_folder(args)
    if args.output is not None:
        check_output_dir(args.output, "--output")
    check_output_file(out / REPORT_FILE, "--output")
    check_splits(args.data, args.split, args.eval_split)
    check_device(args.device)
    refuse_foreign_code(args)
    set_threads(args)
    from st_magnitude.data.beir import load_beir, subsample
    from st_magnitude.evaluation.calibration import (
        calibration_pools,
        calibration_report,
        check_held_out,
        describe_calibration,
        fit_calibration,
    )
    from st_magnitude.model.load import describe_similarity, load_model

    splits = {}
    for split in (args.split, args.eval_split):
        data = load_beir(args.data[0], split, on_missing=args.on_missing)
        splits[split] = subsample(data, args.max_corpus, args.max_queries, args.seed)
        print(splits[split].describe_kept(), flush=True)  # before the model is loaded
    judged = {split: {q: d.queries[q] for q in d.qrels if q in d.queries} for split, d in splits.items()}
    check_held_out(judged[args.split], judged[args.eval_split])
    model = load_model(
        args.model, device=args.device, max_seq_length=args.max_seq_length, trust_remote_code=args.trust_remote_code
    )
    pools = {
        split: calibration_pools(
            model, d.queries, d.corpus, d.qrels, n_negatives=args.n_negatives, batch_size=args.batch_size
        )
        for split, d in splits.items()
    }
    fit = splits[args.split]
    calibration = fit_calibration(
        pools[args.split].positives,
        pools[args.split].negatives,
        args.method,
        meta={
            "data": fit.name,
            "split": args.split,
            "queries": len(fit.qrels),
            "corpus": len(fit.corpus),
            "n_negatives_per_query": args.n_negatives,
            "similarity": describe_similarity(model),
            "similarity_fn_name": getattr(model, "similarity_fn_name", None),
        },
    )
    path = calibration.save(out)
    rows = [
        {"dataset": d.name, "split": split, "queries": len(d.qrels), **calibration_report(calibration, pools[split])}
        for split, d in splits.items()
    ]
    print(f"model: {args.model}   calibration: {args.method}, fitted on {fit.name}/{args.split} -> {path}")
    write_json_atomic(out / REPORT_FILE, rows)
    print(describe_calibration(rows))
    print(f"report rows written to {out / REPORT_FILE}")
    return 0
