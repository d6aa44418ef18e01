"""``st-magnitude compare``: the main job (fine-tune with each similarity variant, evaluate, compare)."""

from __future__ import annotations

import argparse
import textwrap

from st_magnitude.cli._args import add_option, add_options, check_model_path, positive_int, values
from st_magnitude.lab.compare.config import (
    DEFAULT_MODEL,
    DEFAULT_VARIANTS,
    FULL_PROFILE_DEVIATIONS,
    LOSSES,
    PROFILES,
    CompareConfig,
)

#: What ``st-magnitude compare: interrupted`` adds (the CLI's one interrupt line, :func:`st_magnitude.cli.main`).
INTERRUPT_HINT = (
    "re-run the same command to resume (finished runs are kept, training continues from its last checkpoint)"
)


#: CompareConfig fields taken from the option of the same name unchanged.
_PASSED_ON = (
    "model",
    "variants",
    "train_data",
    "eval_data",
    "device",
    "trust_remote_code",
    "save_steps",
)


def _csv(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def _description() -> str:
    intro = (
        "Fine-tune one base model with each similarity variant (same seed, steps and data), evaluate each with its "
        "own similarity (nDCG@10, Recall@100, MRR@10, pooled AUC), run the κ recommender on the base model, and write "
        "results.md / results.csv / plots. Re-running skips finished runs, evaluates newly requested datasets and "
        "resumes interrupted training; one process at a time works in an --output folder."
    )
    full = (
        "--full follows paper 000 App. B (Table 8): lr 5e-6, no warm-up, cosine decay, weight decay 0.01, max grad "
        "norm 1.0, AdamW betas (0.9, 0.98), eps 1e-8, InfoNCE scale 20, batch 128, gamma trained with the encoder's "
        "optimizer settings. Where it departs from the paper:"
    )
    quick = "--quick (default) is ours: lr 5e-5, linear schedule with 10% warm-up, gamma at its own lr 1e-2."
    items = "\n".join(
        textwrap.fill(d, 100, initial_indent="  - ", subsequent_indent="    ") for d in FULL_PROFILE_DEVIATIONS
    )
    return f"{textwrap.fill(intro, 100)}\n\n{textwrap.fill(full, 100)}\n{items}\n\n{textwrap.fill(quick, 100)}"


#: What this command writes, for the CLI's one cleanup rule on failure (:mod:`st_magnitude.cli`).
OUTPUTS = {"output": "resumable"}
#: What this command reads besides ``model`` (option dest -> its name): no output may be or lie inside one.
INPUTS = {"train_data": "--train-data", "eval_data": "--eval-data"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = _description()
    p.formatter_class = argparse.RawDescriptionHelpFormatter  # the description's list of departures
    p.add_argument("--model", default=DEFAULT_MODEL, help="base model: hub id or local folder (default: %(default)s)")
    p.add_argument("--variants", type=_csv, default=DEFAULT_VARIANTS, help="comma-separated (default: all five)")
    p.add_argument("--loss", type=_csv, default=("infonce",), help=f"comma-separated, from: {', '.join(LOSSES)}")
    p.add_argument("--train-data", default="nfcorpus", help="BEIR dataset name or folder to train on (train split)")
    p.add_argument("--eval-data", type=_csv, default=("nfcorpus", "scifact"), help="BEIR names or folders (test)")
    add_options(p, "--data-root")
    add_option(p, "--output", default="runs/compare", help="results folder (default: %(default)s)")
    p.add_argument("--quick", action="store_true", help="the quick profile (default)")
    p.add_argument(
        "--full",
        action="store_true",
        help="the full profile: paper 000's recipe (App. B) as far as one machine allows; departures listed above",
    )
    for name, typ in (
        ("steps", int),
        ("batch-size", int),
        ("max-seq-length", int),
        ("learning-rate", float),
        ("max-corpus", int),
        ("max-queries", int),
        ("kappa-pairs", int),
        ("seed", int),
    ):
        p.add_argument(f"--{name}", type=typ, default=None, help="override the profile")
    p.add_argument(
        "--save-steps",
        type=int,
        default=None,
        help="checkpoint every N steps, for resuming (default: max(10, steps // 5); only the last one is kept)",
    )
    p.add_argument(
        "--seeds",
        type=positive_int,
        default=1,
        help="repeat every run with seeds SEED, SEED+1, … (in OUT/seed-S/) and report means with 95%% intervals "
        "and which differences are within noise (default 1: one run, no intervals; 5 is the recommended count)",
    )
    p.add_argument("--no-kappa", action="store_true", help="skip the κ recommender")
    add_options(p, "--device", "--trust-remote-code")
    p.set_defaults(interrupt_hint=INTERRUPT_HINT)


def _close_progress_bars() -> None:
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        return
    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()


#: What this command reads, checked by the CLI before :func:`run` imports anything heavy (:mod:`st_magnitude.cli`).
ARG_CHECKS = {"model": check_model_path}


def run(args: argparse.Namespace) -> int:
    from st_magnitude.cli._args import check_device
    from st_magnitude.lab.compare.seeds import run_compare_seeds

    if args.quick and args.full:
        raise ValueError("choose one of --quick and --full")
    check_device(args.device)
    profile = "full" if args.full else "quick"
    settings = dict(PROFILES[profile])
    for key in ("steps", "batch_size", "max_seq_length", "learning_rate", "max_corpus", "max_queries", "kappa_pairs"):
        if getattr(args, key) is not None:
            settings[key] = getattr(args, key)
    for key in ("max_corpus", "max_queries"):
        if settings[key] is not None and settings[key] <= 0:
            settings[key] = None  # 0 = no subsampling
    config = CompareConfig(
        losses=args.loss,
        profile=profile,
        seed=args.seed if args.seed is not None else 42,
        kappa=not args.no_kappa,
        data_dir=args.data_root,
        output_dir=args.output,
        **values(args, *_PASSED_ON),
        **settings,
    )
    try:
        run_compare_seeds(config, args.seeds, log=print)
    except KeyboardInterrupt:
        _close_progress_bars()  # else the Trainer's bars are redrawn after the CLI's interrupt line
        raise
    return 0
