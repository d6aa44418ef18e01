"""``st-magnitude diagnose MODEL --data BEIR_DIR...`` (see docs/diagnostics.md)."""

from __future__ import annotations

import logging
from pathlib import Path

from st_magnitude._cli_args import check_output_dir, non_negative_int, positive_int, removed_on_failure

logger = logging.getLogger(__name__)


def add_subcommands(subparsers) -> None:
    p = subparsers.add_parser(
        "diagnose",
        help="magnitude diagnostics + which side to normalise (κ rule with a half-sampling CI); writes a report",
        description=(
            "Norm statistics by role, Cohen's d of document norms (labelled, and label-free with cosine-ranked "
            "pseudo-labels), query-norm CV, a single-model component-FIM profile, κ(F_qnorm) vs κ(F_dnorm) with a "
            "half-sampling interval (inconclusive below 8n pairs), pooled ROC-AUC, cross-evaluation; report.md + "
            "PNGs in --output."
        ),
    )
    p.add_argument("model", help="SentenceTransformer folder (the *pretrained* model for the κ rule)")
    p.add_argument("--data", nargs="+", required=True, metavar="BEIR_DIR", help="local BEIR folder(s)")
    p.add_argument("--split", default="test", help="evaluation split for norms/Cohen's d/AUC (default test)")
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
    p.add_argument("--max-seq-length", type=positive_int, default=128, help="token cap for norms/AUC (default 128)")
    p.add_argument(
        "--kappa-max-seq-length",
        type=positive_int,
        default=64,
        help="token cap for the κ pairs (default 64: 2000 MiniLM pairs encode in about 30 s on 2 cores)",
    )
    p.add_argument("--max-corpus", type=positive_int, default=None, help="NanoBEIR-style corpus subsample per dataset")
    p.add_argument("--max-queries", type=positive_int, default=None)
    p.add_argument("--no-kappa", action="store_true", help="skip the κ rule")
    p.add_argument("--output", default="runs/diagnose", help="report folder (default runs/diagnose)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads")
    p.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="allow the model to run code outside sentence-transformers and st-magnitude (off by default)",
    )
    p.set_defaults(func=_run)


def _check_args(args) -> None:
    """Everything that can be checked before loading a model or reading data."""
    from st_magnitude.integrations.data import _available_splits, load_beir

    if args.n_pairs is not None and args.n_pairs <= 1:
        raise ValueError(f"--n-pairs must be > 1, got {args.n_pairs}")
    for folder in args.data:
        path = Path(folder)
        if not path.is_dir():
            raise FileNotFoundError(f"BEIR dataset folder {folder!r} does not exist or is not a folder.")
        for split, flag in ((args.split, "--split"), (args.pairs_split, "--pairs-split")):
            if split is not None and not (path / "qrels" / f"{split}.tsv").is_file():
                raise FileNotFoundError(
                    f"{flag} {split!r}: {folder} has no qrels/{split}.tsv. Available splits: "
                    f"{_available_splits(path) or 'none'}."
                )
        load_beir(path, args.split)  # a malformed line or missing ids fail here, before the model is loaded
    check_output_dir(args.output, "--output")
    if not args.trust_remote_code and Path(args.model).is_dir():
        from st_magnitude.integrations.models import check_model_code

        check_model_code(args.model)  # refuse foreign code before any work


def _run(args) -> int:
    from st_magnitude.diagnostics.report import diagnose

    _check_args(args)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    model = args.model
    if args.trust_remote_code:  # diagnose() loads without it; a model loaded here with the user's consent is used
        from st_magnitude.integrations.models import load_model

        model = load_model(args.model, trust_remote_code=True)
    with removed_on_failure(args.output):
        diag = _diagnose(diagnose, model, args)
    print(f"model: {args.model} — serves {diag.serves}")
    if diag.kappa is not None:
        print(f"κ rule ({diag.kappa_source}, {diag.kappa_seconds:.1f} s): {diag.kappa.summary()}")
    for ds in diag.datasets:
        print(
            f"{ds.name}: Cohen's d {_d(ds.cohens_d)} ({ds.cohens_d_band}), label-free (cosine top-{ds.label_free_k}) "
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
        split=args.split,
        pairs_split=args.pairs_split or "train",
        n_pairs=args.n_pairs,
        n_bootstrap=args.bootstrap,
        max_seq_length=args.max_seq_length,
        max_corpus=args.max_corpus,
        max_queries=args.max_queries,
        kappa=not args.no_kappa,
        kappa_max_seq_length=args.kappa_max_seq_length,
        output_dir=args.output,
        seed=args.seed,
    )


def _d(d: float | None) -> str:
    return "undefined" if d is None else f"{d:+.3f}"
