"""``st-magnitude inspect MODEL``: print which similarity a model serves and whether it needs roles (JSON)."""

from __future__ import annotations

import argparse
import json

from st_magnitude.cli._args import add_options, check_model_path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="SentenceTransformer folder or hub id")
    add_options(p, "--trust-remote-code")


#: What this command reads, checked by the CLI before :func:`run` imports anything heavy (:mod:`st_magnitude.cli`).
ARG_CHECKS = {"model": check_model_path}


def run(args: argparse.Namespace) -> int:
    check_model_path(args.model)
    from st_magnitude.model.info import carried_similarity, is_asymmetric, model_gammas
    from st_magnitude.model.load import load_model

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
