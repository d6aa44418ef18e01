"""Rows of the GPU benchmark's ``step`` section at large batches: CachedMW against CachedMNRL (mini-batch 32) on
MiniLM in bf16, where MW's pair work (B³ pairs) is largest. Few steps (one warm-up, two alternating rounds of one
step) and a limit per step, so a slow loss costs at most that limit and is reported as over it."""

from __future__ import annotations

import contextlib
import signal
import threading
import time

import torch

LOSSES = ("CMNRL", "CachedMW")


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raise ``TimeoutError`` in the block after ``seconds`` (SIGALRM; no limit off the main thread)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def stop(signum, frame):
        raise TimeoutError(f"a step took over {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _tiled(texts: list[str], n: int) -> list[str]:
    return (texts * (n // max(1, len(texts)) + 1))[:n]


def big_batch_rows(ctx, sync, free, log, load_st, make_loss, autocast, features, to) -> list[dict]:
    device, sizes = ctx["device"], ctx["sizes"]
    info = ctx["models"]["minilm"]
    model = load_st(info, device)
    model.max_seq_length = info["max_seq_length"]
    losses = {name: make_loss(name, model) for name in LOSSES}
    params = list({id(p): p for loss in losses.values() for p in loss.parameters()}.values())
    optimizer = torch.optim.AdamW(params, lr=1e-8)
    limit = sizes["big_step_limit_s"]
    rows = []
    for batch in sizes["big_batches"]:
        q = to(features(model, _tiled(ctx["anchors"], batch)), device)
        d = to(features(model, _tiled(ctx["positives"], batch)), device)
        labels = torch.zeros(batch, device=device)
        res: dict[str, dict] = {name: {"times": [], "peaks": []} for name in losses}

        def one(name: str) -> None:
            optimizer.zero_grad(set_to_none=True)
            with time_limit(limit), autocast("bf16", device):
                value = losses[name]([q, d], labels)
                value = sum(value.values()) if isinstance(value, dict) else value
            with time_limit(limit):
                value.backward()
                optimizer.step()
                sync(device)

        for name in losses:  # warm-up, and the error of a loss over the limit
            try:
                one(name)
            except Exception as exc:  # noqa: BLE001 - recorded in the JSON, the other loss goes on
                res[name]["error"] = f"{type(exc).__name__}: {exc}"[:300]
        for _ in range(2):
            for name in losses:
                if "error" in res[name]:
                    continue
                if device.startswith("cuda"):
                    torch.cuda.reset_peak_memory_stats()
                t0 = time.perf_counter()
                try:
                    one(name)
                except Exception as exc:  # noqa: BLE001
                    res[name]["error"] = f"{type(exc).__name__}: {exc}"[:300]
                    continue
                res[name]["times"].append(time.perf_counter() - t0)
                if device.startswith("cuda"):
                    res[name]["peaks"].append(torch.cuda.max_memory_allocated())
        for name, r in res.items():
            row = {"model": "minilm", "batch": batch, "dtype": "bf16", "loss": name, "steps_timed": len(r["times"])}
            if "error" in r and not r["times"]:
                row["error"] = r["error"]
            else:
                row["ms"] = sum(r["times"]) / len(r["times"]) * 1e3  # the median of two
                row["peak_mib"] = max(r["peaks"]) / 2**20 if r["peaks"] else None
            rows.append(row)
        log(f"step minilm batch {batch} bf16: {rows[-2:]}")
        q = d = None
        free(device)
    model = losses = optimizer = None
    free(device)
    return rows
