"""``st-magnitude strip MODEL``: remove every trailing Normalize module from a saved model (no weights loaded)."""

from __future__ import annotations

import argparse

from st_magnitude.cli._args import add_option, check_output_dir

#: What this command writes, for the CLI's one cleanup rule on failure (:mod:`st_magnitude.cli`).
OUTPUTS = {"output": "folder"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="saved SentenceTransformer folder")
    add_option(
        p,
        "--output",
        help="write the stripped copy here (default: edit in place, atomically; a link to a model folder, or a path "
        "through '..', edits the folder it leads to)",
    )


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    if not (Path(args.model) / "modules.json").is_file():
        raise FileNotFoundError(f"{args.model} is not a saved SentenceTransformer folder (no modules.json)")
    if args.output:
        check_output_dir(args.output, "--output", must_be_empty=True)
    else:  # in place: the edited copy is staged beside the folder (links and '..' resolved), then swapped with it
        check_output_dir(Path(args.model).resolve().parent, "the folder holding the model")
    from st_magnitude.model.convert import strip_normalize

    path = strip_normalize(Path(args.model), None if args.output is None else Path(args.output))
    print(f"stripped model written to {path}")
    return 0
