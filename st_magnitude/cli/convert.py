"""``st-magnitude convert MODEL SIMILARITY -o OUT``: make a model carry a similarity variant and save it."""

from __future__ import annotations

import argparse

from st_magnitude._similarity_names import gammas_of
from st_magnitude.cli._args import (
    add_option,
    add_options,
    check_model_path,
    check_output_dir,
    positive_float,
    positive_int,
    similarity_arg,
    similarity_names,
)

# torch-free copies of st_magnitude.model.stores.STORES / DEFAULT_ROUTES
# (tests/serving/test_stores.py checks they agree)
STORES = ("dot", "cosine", "l2")
DEFAULT_ROUTES = ("document",)


def check_max_norm(value: float | None, what: str) -> None:
    """A one-line error for a bound M outside :data:`st_magnitude.modules._store_limits.MAX_NORM_RANGE`."""
    from st_magnitude.modules._store_limits import max_norm_problem

    problem = None if value is None else max_norm_problem(value)
    if problem:
        raise ValueError(f"{what} {value!r}: {problem}")


def check_margin(value: float, what: str) -> None:
    """A one-line error for a margin outside ``[1, MAX_MARGIN]`` (:mod:`st_magnitude.modules._store_limits`)."""
    from st_magnitude.modules._store_limits import margin_problem

    problem = margin_problem(value)
    if problem:
        raise ValueError(f"{what} {value!r}: {problem}")


#: What this command writes, for the CLI's one cleanup rule on failure (:mod:`st_magnitude.cli`).
OUTPUTS = {"output": "folder"}
#: What this command reads besides ``model`` (option dest -> its name): no output may be or lie inside one.
INPUTS = {"norm_texts": "--norm-texts"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="SentenceTransformer folder or hub id")
    p.add_argument(
        "similarity",
        type=similarity_arg("carry"),
        metavar="SIMILARITY",
        help=f"one of: {', '.join(similarity_names('carry'))}",
    )
    add_option(p, "--output", required=True, help="folder to save the converted model to (must be new/empty)")
    p.add_argument(
        "--store",
        choices=STORES,
        default="dot",
        help="the metric of the vector store that will index the vectors (default dot). cosine / l2 with a variant "
        "that keeps document magnitude (dot, qnorm, learnable) append one coordinate so that metric ranks as trained "
        "(docs/deployment.md); it needs --max-norm or --norm-texts",
    )
    p.add_argument(
        "--max-norm",
        type=positive_float,
        default=None,
        help="the document-norm bound M for cosine / l2 (0 < M <= 1e18; about the largest document norm)",
    )
    p.add_argument(
        "--norm-texts",
        default=None,
        metavar="FILE",
        help="documents to measure M on: a BEIR corpus.jsonl (title + text) or a text file, one document per line",
    )
    p.add_argument("--norm-max-texts", type=positive_int, default=10000, help="read at most this many (default 10000)")
    p.add_argument(
        "--norm-margin", type=positive_float, default=1.05, help="M = margin x largest norm, 1 to 10 (default 1.05)"
    )
    p.add_argument(
        "--default-route",
        choices=DEFAULT_ROUTES,
        default=None,
        help="opt-in: a role-less encode() uses the document route instead of raising, for stacks that cannot pass "
        "a role; top-k stays exact with --store dot (or a dnorm / cosine model), scores are scaled per query, and "
        "symmetric misuse is no longer refused. Refused with --store cosine / l2 for dot, qnorm and learnable",
    )
    add_options(p, "--trust-remote-code")


def read_texts(path: str, limit: int) -> list[str]:
    """Up to ``limit`` documents of a BEIR ``corpus.jsonl`` (title + text, as the evaluators join them) or of a UTF-8
    text file with one document per line (blank lines skipped); errors name the file and line."""
    from st_magnitude._trust import Fields, InputFileError, parse_json_line, read_lines
    from st_magnitude.data.text import doc_text

    texts: list[str] = []
    for n, line in read_lines(path):
        if len(texts) >= limit:
            break
        if path.endswith(".jsonl"):
            doc = Fields(parse_json_line(line, path, n), path, str(n), what=f"line {n}")
            title = doc.get("title", (str, type(None)), None)
            text = doc.get("text", (str, type(None)), None)
            texts.append(doc_text({"title": title, "text": text}))
        else:
            texts.append(line)
    if not texts:
        raise InputFileError(path, "no documents in the file (--norm-texts)")
    return texts


#: What this command reads, checked by the CLI before :func:`run` imports anything heavy (:mod:`st_magnitude.cli`).
ARG_CHECKS = {"model": check_model_path}


def run(args: argparse.Namespace) -> int:
    check_model_path(args.model)
    check_output_dir(args.output, "--output", must_be_empty=True)
    check_max_norm(args.max_norm, "--max-norm")
    check_margin(args.norm_margin, "--norm-margin")
    texts = read_texts(args.norm_texts, args.norm_max_texts) if args.norm_texts else None
    if args.default_route and args.store != "dot" and (gammas_of(args.similarity) or (0, 0))[1] != 1:
        from st_magnitude.model.stores import ROLELESS_STORE_REFUSAL

        raise ValueError(ROLELESS_STORE_REFUSAL)  # before loading the model

    from st_magnitude.model._layout import read_layout
    from st_magnitude.model._save import save_model
    from st_magnitude.model.load import load_model
    from st_magnitude.model.stores import convert_for_store

    model = load_model(args.model, device="cpu", trust_remote_code=args.trust_remote_code)
    convert_for_store(
        model,
        args.similarity,
        args.store,
        max_norm=args.max_norm,
        documents=texts,
        margin=args.norm_margin,
        default_route=args.default_route,
    )
    save_model(model, args.output)
    layout = read_layout(model)
    gq, gd = layout.gammas or (float("nan"), float("nan"))
    extra = [f"store={args.store}"]
    aug = layout.find("mips_augment")
    if aug:
        extra.append(
            f"max_norm M={aug[0].max_norm:.6g} (load with st_magnitude.model.load_model, or stock "
            "SentenceTransformer(..., trust_remote_code=True))"
        )
    if args.default_route:
        extra.append(f"default_route={args.default_route}")
    print(
        f"{args.similarity}: gamma_query={gq:.3f} gamma_document={gd:.3f}; {'; '.join(extra)}; saved to {args.output}"
    )
    return 0
