"""The GPU benchmark's ``encode`` section: documents/s of ``encode_document`` through a qnorm model against the plain
ST model's ``encode``, fp16, with the tokenizer serial (``TOKENIZERS_PARALLELISM=false``, the bench's setting) and
parallel (what a user gets by default)."""

from __future__ import annotations

import os
import statistics
import time
import warnings

import torch

#: tokenizer settings measured, in this order: serial leaves both sides tokenizer-bound on a fast GPU
TOKENIZER_SETTINGS = {"serial": "false", "parallel": "true"}


def section_encode(args, ctx, sync, free, log, load_st) -> dict:
    from st_magnitude.model.convert import apply_similarity

    device, sizes = ctx["device"], ctx["sizes"]
    texts = ctx["corpus"][: sizes["encode_docs"]]
    info = ctx["models"]["minilm"]
    plain = load_st(info, device)
    ours = load_st(info, device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        apply_similarity(ours, "qnorm", warn_on_strip=False)
    half = device.startswith("cuda")
    if half:
        plain.half()
        ours.half()
    bs = sizes["encode_batch"]

    def run_plain():
        return plain.encode(texts, batch_size=bs, convert_to_tensor=True, show_progress_bar=False)

    def run_ours():
        return ours.encode_document(texts, batch_size=bs, convert_to_tensor=True, show_progress_bar=False)

    res: dict = {
        "docs": len(texts),
        "batch": bs,
        "dtype": "fp16" if half else "fp32",
        "max_seq_length": plain.max_seq_length,
        "tokenizers": {},
    }
    before = os.environ.get("TOKENIZERS_PARALLELISM")
    vecs = {}
    try:
        for setting, value in TOKENIZER_SETTINGS.items():
            os.environ["TOKENIZERS_PARALLELISM"] = value  # read by the tokenizers library at each batch
            times: dict[str, list[float]] = {"plain": [], "ours": []}
            for fn in (run_plain, run_ours):  # warm-up
                fn()
            for _ in range(sizes["encode_rounds"]):
                for name, fn in (("plain", run_plain), ("ours", run_ours)):
                    sync(device)
                    t0 = time.perf_counter()
                    vecs[name] = fn()
                    sync(device)
                    times[name].append(time.perf_counter() - t0)
            row = {
                "TOKENIZERS_PARALLELISM": value,
                "plain_docs_per_s": len(texts) / statistics.median(times["plain"]),
                "ours_docs_per_s": len(texts) / statistics.median(times["ours"]),
            }
            row["ratio"] = row["ours_docs_per_s"] / row["plain_docs_per_s"]
            res["tokenizers"][setting] = row
    finally:
        if before is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = before
    # qnorm documents are raw (unnormalized); the plain model normalizes: compare directions
    a = torch.nn.functional.normalize(vecs["ours"].float(), dim=-1)
    b = torch.nn.functional.normalize(vecs["plain"].float(), dim=-1)
    res["max_direction_diff"] = float((a - b).abs().max())
    log(f"encode: {res}")
    plain = ours = None
    free(device)
    return res
