"""``st-magnitude convert MODEL SIMILARITY -o OUT``: make a model carry a similarity variant and save it."""

from __future__ import annotations

import argparse

from st_magnitude.cli._args import (
    add_options,
    check_model_path,
    check_output_dir,
    positive_float,
    positive_int,
    removed_on_failure,
    similarity_arg,
    similarity_names,
)

# torch-free copies of st_magnitude.stores.STORES / DEFAULT_ROUTES (tests/serving/test_stores.py checks they agree)
STORES = ("dot", "cosine", "l2")
DEFAULT_ROUTES = ("document",)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="SentenceTransformer folder or hub id")
    p.add_argument(
        "similarity",
        type=similarity_arg("carry"),
        metavar="SIMILARITY",
        help=f"one of: {', '.join(similarity_names('carry'))}",
    )
    p.add_argument("-o", "--output", required=True, help="folder to save the converted model to (must be new/empty)")
    p.add_argument(
        "--store",
        choices=STORES,
        default="dot",
        help="the metric of the vector store that will index the vectors (default dot). cosine / l2 with a variant "
        "that keeps document magnitude (dot, qnorm, learnable) append one coordinate so that metric ranks as trained "
        "(docs/deployment.md); it needs --max-norm or --norm-texts",
    )
    p.add_argument("--max-norm", type=positive_float, default=None, help="the document-norm bound M for cosine / l2")
    p.add_argument(
        "--norm-texts",
        default=None,
        metavar="FILE",
        help="documents to measure M on: a BEIR corpus.jsonl (title + text) or a text file, one document per line",
    )
    p.add_argument("--norm-max-texts", type=positive_int, default=10000, help="read at most this many (default 10000)")
    p.add_argument("--norm-margin", type=positive_float, default=1.05, help="M = margin x largest norm (default 1.05)")
    p.add_argument(
        "--default-route",
        choices=DEFAULT_ROUTES,
        default=None,
        help="opt-in: a role-less encode() uses the document route instead of raising, for stacks that cannot pass "
        "a role; top-k stays exact, scores are scaled per query, and symmetric misuse is no longer refused",
    )
    add_options(p, "--trust-remote-code")


def read_texts(path: str, limit: int) -> list[str]:
    """Up to ``limit`` documents of a BEIR ``corpus.jsonl`` (title + text, as the evaluators join them) or of a text
    file with one document per line (blank lines skipped)."""
    import json

    from st_magnitude.data.text import doc_text

    texts: list[str] = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if len(texts) >= limit:
                break
            if not line.strip():
                continue
            if path.endswith(".jsonl"):
                try:
                    texts.append(doc_text(json.loads(line)))
                except (json.JSONDecodeError, TypeError, AttributeError) as e:
                    raise SystemExit(f"--norm-texts {path}: line {n} is not a JSON object with title/text: {e}")
            else:
                texts.append(line.rstrip("\n"))
    if not texts:
        raise SystemExit(f"--norm-texts {path}: no documents in the file")
    return texts


def run(args: argparse.Namespace) -> int:
    check_model_path(args.model)
    check_output_dir(args.output, "--output", must_be_empty=True)
    texts = read_texts(args.norm_texts, args.norm_max_texts) if args.norm_texts else None
    if args.norm_margin < 1.0:
        raise SystemExit(f"--norm-margin must be >= 1, got {args.norm_margin}")

    from st_magnitude.integrations.models import load_model
    from st_magnitude.model_info import model_gammas
    from st_magnitude.modules.mips_augment import MIPSAugment
    from st_magnitude.stores import convert_for_store

    model = load_model(args.model, device="cpu", trust_remote_code=args.trust_remote_code)
    try:
        convert_for_store(
            model,
            args.similarity,
            args.store,
            max_norm=args.max_norm,
            documents=texts,
            margin=args.norm_margin,
            default_route=args.default_route,
        )
    except ValueError as e:
        raise SystemExit(f"convert: {e}")
    with removed_on_failure(args.output):
        model.save(args.output)
    gq, gd = model_gammas(model) or (float("nan"), float("nan"))
    extra = [f"store={args.store}"]
    aug = [m for m in model if isinstance(m, MIPSAugment)]
    if aug:
        extra.append(
            f"max_norm M={aug[0].max_norm:.6g} (load with st_magnitude.integrations.load_model, or stock "
            "SentenceTransformer(..., trust_remote_code=True))"
        )
    if args.default_route:
        extra.append(f"default_route={args.default_route}")
    print(
        f"{args.similarity}: gamma_query={gq:.3f} gamma_document={gd:.3f}; {'; '.join(extra)}; saved to {args.output}"
    )
    return 0
