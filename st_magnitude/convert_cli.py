"""``st-magnitude strip`` / ``convert`` / ``inspect``: model surgery from the command line."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from st_magnitude.similarity import SIMILARITY_NAMES


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "strip", help="remove every Normalize module from a saved model (file level, no weights loaded)"
    )
    p.add_argument("model", help="saved SentenceTransformer folder")
    p.add_argument("-o", "--output", help="write the stripped copy here (default: edit in place)")
    p.set_defaults(func=_strip)

    p = sub.add_parser("convert", help="make a model carry a similarity variant (apply_similarity) and save it")
    p.add_argument("model", help="SentenceTransformer folder or hub id")
    p.add_argument("similarity", help=f"one of: {', '.join(n for n in SIMILARITY_NAMES if n != 'tn')}")
    p.add_argument("-o", "--output", required=True, help="folder to save the converted model to (must be new/empty)")
    p.add_argument("--trust-remote-code", action="store_true", help="needed to load a learnable model")
    p.set_defaults(func=_convert)

    p = sub.add_parser("inspect", help="print which similarity a model serves and whether it needs roles")
    p.add_argument("model", help="SentenceTransformer folder or hub id")
    p.add_argument("--trust-remote-code", action="store_true")
    p.set_defaults(func=_inspect)


def _check_model_path(model: str) -> None:
    if os.path.sep in model or model.startswith("."):
        if not Path(model).exists():
            raise FileNotFoundError(f"model folder {model!r} does not exist")


def _check_output(output: str) -> None:
    out = Path(output)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"output folder {output!r} exists and is not empty")
    parent = out.parent if not out.exists() else out
    if not os.access(parent if parent.exists() else Path.cwd(), os.W_OK):
        raise PermissionError(f"output folder {output!r} is not writable")


def _strip(args: argparse.Namespace) -> int:
    from st_magnitude.convert import strip_normalize

    path = strip_normalize(Path(args.model), None if args.output is None else Path(args.output))
    print(f"stripped model written to {path}")
    return 0


def _convert(args: argparse.Namespace) -> int:
    from sentence_transformers import SentenceTransformer

    from st_magnitude.convert import apply_similarity, model_gammas
    from st_magnitude.similarity import validate_similarity_name

    name = validate_similarity_name(args.similarity)
    _check_model_path(args.model)
    _check_output(args.output)
    model = SentenceTransformer(args.model, device="cpu", trust_remote_code=args.trust_remote_code)
    apply_similarity(model, name)
    model.save(args.output)
    gq, gd = model_gammas(model) or (float("nan"), float("nan"))
    print(f"{name}: gamma_query={gq:.3f} gamma_document={gd:.3f}; saved to {args.output}")
    return 0


def _inspect(args: argparse.Namespace) -> int:
    from sentence_transformers import SentenceTransformer

    from st_magnitude.convert import carried_similarity, is_asymmetric, model_gammas

    _check_model_path(args.model)
    model = SentenceTransformer(args.model, device="cpu", trust_remote_code=args.trust_remote_code)
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
