"""``st-magnitude strip`` / ``convert`` / ``inspect``: model surgery from the command line."""

from __future__ import annotations

import argparse
import json

from st_magnitude._cli_args import check_output_dir, removed_on_failure
from st_magnitude.integrations.cli import TRUST_HELP, similarity_arg, similarity_names


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "strip", help="remove every trailing Normalize module from a saved model (file level, no weights loaded)"
    )
    p.add_argument("model", help="saved SentenceTransformer folder")
    p.add_argument("-o", "--output", help="write the stripped copy here (default: edit in place, atomically)")
    p.set_defaults(func=_strip)

    p = sub.add_parser("convert", help="make a model carry a similarity variant (apply_similarity) and save it")
    p.add_argument("model", help="SentenceTransformer folder or hub id")
    p.add_argument(
        "similarity",
        type=similarity_arg("carry"),
        metavar="SIMILARITY",
        help=f"one of: {', '.join(similarity_names('carry'))}",
    )
    p.add_argument("-o", "--output", required=True, help="folder to save the converted model to (must be new/empty)")
    p.add_argument("--trust-remote-code", action="store_true", help=TRUST_HELP)
    p.set_defaults(func=_convert)

    p = sub.add_parser("inspect", help="print which similarity a model serves and whether it needs roles")
    p.add_argument("model", help="SentenceTransformer folder or hub id")
    p.add_argument("--trust-remote-code", action="store_true", help=TRUST_HELP)
    p.set_defaults(func=_inspect)


def _check_model_path(model: str) -> None:
    """The same up-front test as the loader: a missing local-looking path is a one-line error, not a hub lookup."""
    from pathlib import Path

    if not Path(model).exists() and (Path(model).is_absolute() or model.startswith(".") or model.count("/") != 1):
        raise FileNotFoundError(f"model folder {model!r} does not exist (a hub id has the form 'organisation/name').")


def _strip(args: argparse.Namespace) -> int:
    from pathlib import Path

    from st_magnitude.convert import strip_normalize

    if not (Path(args.model) / "modules.json").is_file():
        raise FileNotFoundError(f"{args.model} is not a saved SentenceTransformer folder (no modules.json)")
    if args.output:
        check_output_dir(args.output, "--output", must_be_empty=True)
    else:  # in place: the edited copy is staged beside the folder, then renamed over it
        check_output_dir(Path(args.model).absolute().parent, "the folder holding the model")
    path = strip_normalize(Path(args.model), None if args.output is None else Path(args.output))
    print(f"stripped model written to {path}")
    return 0


def _convert(args: argparse.Namespace) -> int:
    from st_magnitude.convert import apply_similarity, model_gammas
    from st_magnitude.integrations.models import load_model

    _check_model_path(args.model)
    check_output_dir(args.output, "--output", must_be_empty=True)
    model = load_model(args.model, device="cpu", trust_remote_code=args.trust_remote_code)
    apply_similarity(model, args.similarity)
    with removed_on_failure(args.output):
        model.save(args.output)
    gq, gd = model_gammas(model) or (float("nan"), float("nan"))
    print(f"{args.similarity}: gamma_query={gq:.3f} gamma_document={gd:.3f}; saved to {args.output}")
    return 0


def _inspect(args: argparse.Namespace) -> int:
    from st_magnitude.convert import carried_similarity, is_asymmetric, model_gammas
    from st_magnitude.integrations.models import load_model

    _check_model_path(args.model)
    model = load_model(args.model, device="cpu", trust_remote_code=args.trust_remote_code)
    gammas = model_gammas(model)
    info = {
        "modules": [type(m).__name__ for m in model],
        "similarity_fn_name": model.similarity_fn_name,
        "gamma_query": None if gammas is None else gammas[0],
        "gamma_document": None if gammas is None else gammas[1],
        "converted": carried_similarity(model) is not None,
        "needs_roles": is_asymmetric(model),
    }
    print(json.dumps(info, indent=2))
    return 0
