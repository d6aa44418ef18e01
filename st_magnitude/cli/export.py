"""``st-magnitude export MODEL -o OUT``: one ONNX graph per role, fused, optionally int8 (see docs/deployment.md)."""

from __future__ import annotations

import argparse

from st_magnitude.cli._args import (
    add_option,
    add_options,
    check_model_path,
    check_output_dir,
    int_range,
    refuse_foreign_code,
    values,
)

DESCRIPTION = (
    "Trace encode_query and encode_document (the role transform folded in) to query.onnx and document.onnx, fuse "
    "attention, LayerNorm and GELU with ONNX Runtime's transformer optimizer (float32), optionally quantize the "
    "weights to int8, and save the tokenizer beside them. OUT must be a new or empty folder. Load the result with "
    "st_magnitude.serving.onnx.OnnxEncoder(OUT)."
)


#: What this command writes, for the CLI's one cleanup rule on failure (:mod:`st_magnitude.cli`).
OUTPUTS = {"output": "folder"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    from st_magnitude.serving.onnx_graphs import KEEP_F32, OPSET_RANGE, QUANTIZATIONS

    p.add_argument("model", help="SentenceTransformer folder (or hub id, online only)")
    add_option(p, "--output", required=True, help="new or empty folder for the graphs")
    p.add_argument(
        "--quantize",
        choices=QUANTIZATIONS,
        default="none",
        help="int8: weights per output channel (faster; the ranking moves, see docs/deployment.md). Default: none",
    )
    p.add_argument(
        "--keep-f32",
        default=KEEP_F32,
        metavar="REGEX",
        help=f"with --quantize int8: MatMul nodes (by name) kept in float32; '' quantizes all (default {KEEP_F32!r})",
    )
    p.add_argument("--no-optimize", action="store_true", help="skip the fusions (the graphs as torch traces them)")
    p.add_argument(
        "--opset",
        type=int_range(*OPSET_RANGE),
        default=17,
        help=f"ONNX opset, {OPSET_RANGE[0]} to {OPSET_RANGE[1]} (default 17)",
    )
    add_options(p, "--max-seq-length", "--trust-remote-code")


#: What this command reads, checked by the CLI before :func:`run` imports anything heavy (:mod:`st_magnitude.cli`).
ARG_CHECKS = {"model": check_model_path}


def run(args: argparse.Namespace) -> int:
    check_model_path(args.model)
    check_output_dir(args.output, "--output", must_be_empty=True)
    refuse_foreign_code(args)
    from st_magnitude.model.load import load_model
    from st_magnitude.serving.onnx import export_onnx

    model = load_model(args.model, **values(args, "max_seq_length", "trust_remote_code"))
    out = export_onnx(
        model,
        args.output,
        args.opset,
        optimize=not args.no_optimize,
        quantize=args.quantize,
        keep_f32=args.keep_f32,
    )
    print(f"ONNX export written to {out} (optimize={not args.no_optimize}, quantize={args.quantize})")
    return 0
