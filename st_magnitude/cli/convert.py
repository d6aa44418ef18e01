"""``st-magnitude convert MODEL SIMILARITY -o OUT``: make a model carry a similarity variant and save it."""

from __future__ import annotations

import argparse

from st_magnitude.cli._args import (
    add_options,
    check_model_path,
    check_output_dir,
    removed_on_failure,
    similarity_arg,
    similarity_names,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="SentenceTransformer folder or hub id")
    p.add_argument(
        "similarity",
        type=similarity_arg("carry"),
        metavar="SIMILARITY",
        help=f"one of: {', '.join(similarity_names('carry'))}",
    )
    p.add_argument("-o", "--output", required=True, help="folder to save the converted model to (must be new/empty)")
    add_options(p, "--trust-remote-code")


def run(args: argparse.Namespace) -> int:
    from st_magnitude.convert import apply_similarity
    from st_magnitude.integrations.models import load_model
    from st_magnitude.model_info import model_gammas

    check_model_path(args.model)
    check_output_dir(args.output, "--output", must_be_empty=True)
    model = load_model(args.model, device="cpu", trust_remote_code=args.trust_remote_code)
    apply_similarity(model, args.similarity)
    with removed_on_failure(args.output):
        model.save(args.output)
    gq, gd = model_gammas(model) or (float("nan"), float("nan"))
    print(f"{args.similarity}: gamma_query={gq:.3f} gamma_document={gd:.3f}; saved to {args.output}")
    return 0
