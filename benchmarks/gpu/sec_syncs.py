"""The GPU benchmark's ``syncs`` section: host syncs in one steady-state training step (after the calls that run
the first calls' checks), counted by the CUDA sync checker, in the loss alone and in the whole step."""

from __future__ import annotations

import contextlib
import warnings

import torch


@contextlib.contextmanager
def count_syncs(device: str):
    """A list that holds one entry per host sync the CUDA sync checker warned about inside the block."""
    found: list[str] = []
    if not device.startswith("cuda"):
        yield found
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield found
        finally:
            torch.cuda.set_sync_debug_mode("default")
    found.extend(str(w.message).splitlines()[0] for w in caught if "synchroniz" in str(w.message).lower())


def steady_calls() -> int:
    """Calls made before the counted one: those that run the duplicate-positive check (the first calls'), so the
    counted call is a steady-state step (the finiteness flag is read every ``FINITE_CHECK_INTERVAL`` calls, later)."""
    from st_magnitude.losses._batch import DUPLICATE_CHECK_FIRST

    return DUPLICATE_CHECK_FIRST


def _total(value):
    return sum(value.values()) if isinstance(value, dict) else value


def section_syncs(args, ctx, free, log, load_st, batches, make_loss, pairs) -> list[dict]:
    device = ctx["device"]
    info = ctx["models"]["minilm"]
    batch = ctx["sizes"]["models"]["minilm"]
    model = load_st(info, device)
    model.max_seq_length = info["max_seq_length"]
    (q, d), labels = batches(model, ctx["anchors"], ctx["positives"], batch, 1, device)[0], torch.zeros(batch)
    labels = labels.to(device)
    dim = model.get_embedding_dimension()
    g = torch.Generator().manual_seed(0)
    emb = [torch.randn(batch, dim, generator=g).to(device).requires_grad_() for _ in range(2)]
    before = steady_calls()
    rows = []
    for name in ("MNRL", "CMNRL", *pairs):
        loss = make_loss(name, model)
        row: dict = {"loss": name, "measured": device.startswith("cuda"), "counted_call": before + 1}
        try:
            for i in range(before + 1):
                with count_syncs(device) as full_step:
                    _total(loss([q, d], labels)).backward()
            if hasattr(loss, "host_reads_per_step"):  # MW's depends on the step's layout: read after it
                row["declared_host_reads"] = loss.host_reads_per_step
            row["step_syncs"] = len(full_step)
            row["step_sync_sites"] = sorted(set(full_step))[:5]
            inner = getattr(loss, "compute_loss_from_embeddings", None)
            if inner is not None and not name.startswith("C"):  # cached losses take features, not embeddings
                for i in range(before + 1):
                    with count_syncs(device) as loss_only:
                        for e in emb:
                            e.grad = None
                        # L2Dir's NAP head reads its own input (the pooled embedding by default) beside the embeddings
                        value = inner(emb, [e for e in emb], labels) if name == "L2Dir" else inner(emb, labels)
                        _total(value).backward()
                row["loss_only_syncs"] = len(loss_only)
                row["loss_only_sites"] = sorted(set(loss_only))[:5]
        except Exception as exc:  # noqa: BLE001 - recorded, the other losses go on
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        rows.append(row)
        log(f"syncs {name}: {row}")
    del model
    free(device)
    return rows
