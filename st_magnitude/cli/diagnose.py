"""``st-magnitude diagnose MODEL --data BEIR_DIR...``: magnitude diagnostics, κ rule (see docs/diagnostics.md)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from st_magnitude.cli._args import (
    SUBSAMPLE,
    add_option,
    add_options,
    check_data_folder,
    check_model_path,
    check_output_dir,
    non_negative_int,
    positive_int,
    refuse_foreign_code,
    set_threads,
    values,
)

logger = logging.getLogger(__name__)


DESCRIPTION = (
    "Norm statistics by role, Cohen's d of document norms (labelled, and label-free with cosine-ranked "
    "pseudo-labels), query-norm CV, a single-model component-FIM profile, κ(F_qnorm) vs κ(F_dnorm) with a "
    "half-sampling interval (inconclusive below 8n pairs), pooled ROC-AUC, cross-evaluation; report.md + "
    "PNGs in --output."
)


#: What this command writes, for the CLI's one cleanup rule on failure (:mod:`st_magnitude.cli`).
OUTPUTS = {"output": "folder"}
#: What this command reads besides ``model`` (option dest -> its name): no output may be or lie inside one.
INPUTS = {"data": "--data"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="SentenceTransformer folder (the *pretrained* model for the κ rule)")
    add_options(p, "--data")
    add_option(p, "--split", help="evaluation split for norms/Cohen's d/AUC (default test)")
    p.add_argument(
        "--pairs-split",
        default=None,
        help="qrels split the κ pairs are sampled from (default: train, or test for a folder without train; "
        "a split given here must exist in every folder)",
    )
    p.add_argument(
        "--n-pairs",
        type=positive_int,
        default=None,
        help="(query, positive) pairs for κ (default 8n from the model's embedding dim n, e.g. 3072 for n = 384; "
        "fewer give an inconclusive verdict)",
    )
    p.add_argument(
        "--resamples",
        "--bootstrap",
        dest="bootstrap",
        type=non_negative_int,
        default=100,
        help="half-sample replicates (N/2 pairs each, without replacement) for the κ interval (default 100)",
    )
    add_option(
        p,
        "--max-seq-length",
        default=128,
        help="token cap for norms/AUC (default 128, lowered to the backbone's limit when that is smaller)",
    )
    p.add_argument(
        "--kappa-max-seq-length",
        type=positive_int,
        default=64,
        help="token cap for the κ pairs (default 64: 2000 MiniLM pairs encode in about 30 s on 2 cores)",
    )
    add_options(p, "--max-corpus")
    add_options(p, "--max-queries")
    p.add_argument("--no-kappa", action="store_true", help="skip the κ rule")
    add_option(p, "--output", default="runs/diagnose", help="report folder (default runs/diagnose)")
    add_option(p, "--seed", help="random seed: subsamples, κ pairs and half-samples (default 42)")
    add_options(p, "--threads", "--trust-remote-code")


def _check_args(args: argparse.Namespace) -> None:
    """Everything that can be checked before loading a model or reading data."""
    from st_magnitude.data.beir import _available_splits, load_beir, missing_folder, subsample

    if args.n_pairs is not None and args.n_pairs <= 1:
        raise ValueError(f"--n-pairs must be > 1, got {args.n_pairs}")
    for folder in args.data:
        path = Path(folder)
        if not path.is_dir():
            raise missing_folder(folder)
        for split, flag in ((args.split, "--split"), (args.pairs_split, "--pairs-split")):
            if split is not None and not (path / "qrels" / f"{split}.tsv").is_file():
                raise FileNotFoundError(
                    f"{flag} {split!r}: {folder} has no qrels/{split}.tsv. Available splits: "
                    f"{_available_splits(path) or 'none'}."
                )
        data = load_beir(path, args.split)  # a malformed line or missing ids fail here, before the model is loaded
        if args.max_corpus is not None or args.max_queries is not None:
            data = subsample(data, args.max_corpus, args.max_queries, args.seed)  # as diagnose() will
        print(data.describe_kept(), flush=True)
    check_output_dir(args.output, "--output")
    refuse_foreign_code(args)  # before any work


#: What this command reads, checked by the CLI before :func:`run` imports anything heavy (:mod:`st_magnitude.cli`).
ARG_CHECKS = {"model": check_model_path, "data": check_data_folder}


def run(args: argparse.Namespace) -> int:
    _check_args(args)
    from st_magnitude.diagnostics.report import diagnose

    set_threads(args)
    model = args.model
    if args.trust_remote_code:  # diagnose() loads without it; a model loaded here with the user's consent is used
        from st_magnitude.model.load import load_model

        model = load_model(args.model, trust_remote_code=True)
    diag = _diagnose(diagnose, model, args)  # a failure takes back the --output it created (OUTPUTS)
    print(f"model: {args.model} — serves {diag.serves}")
    if diag.kappa is not None:
        print(f"κ rule ({diag.kappa_source}, {diag.kappa_seconds:.1f} s): {diag.kappa.summary()}")
    for ds in diag.datasets:
        print(
            f"{ds.name}: Cohen's d {_labelled_d(ds)}, label-free (cosine top-{ds.label_free_k}) "
            f"{_d(ds.cohens_d_label_free)}; "
            f"query-norm CV {ds.query_norms['cv_percent']:.2f}%; pooled AUC {ds.pooled_auc:.4f} "
            f"(per-query {ds.per_query_auc:.4f})" + (f" [{ds.note}]" if ds.note else "")
        )
    print(f"report: {diag.report_path}")
    return 0


def _diagnose(diagnose, model, args):
    return diagnose(
        model,
        args.data,
        pairs_split=args.pairs_split or "train",
        n_bootstrap=args.bootstrap,
        kappa=not args.no_kappa,
        output_dir=args.output,
        **values(args, *SUBSAMPLE, "n_pairs", "max_seq_length", "kappa_max_seq_length"),
    )


def _labelled_d(ds) -> str:
    """The labelled Cohen's d with its band, or why it is undefined and what to do."""
    if ds.cohens_d is not None:
        return f"{ds.cohens_d:+.3f} ({ds.cohens_d_band})"
    n = ds.n_relevant + ds.n_irrelevant
    if ds.n_irrelevant < 2:
        why = f"{ds.n_relevant} of the {n} documents are judged relevant, so there is no irrelevant group to compare"
        fix = (
            "a larger --max-corpus adds unjudged documents (the subsample keeps every judged one)"
            if ds.note
            else "this split judges nearly every document: read the label-free d"
        )
    else:
        why, fix = f"only {ds.n_relevant} of the {n} documents are judged relevant", "use a split with more qrels"
    return f"undefined ({why}; {fix})"


def _d(d: float | None) -> str:
    return "undefined" if d is None else f"{d:+.3f}"
