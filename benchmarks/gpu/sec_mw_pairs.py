"""The GPU benchmark's ``mw_pairs`` section: MW's two pair stages, grid against every pair, loss + backward on the
same embeddings at B = 64 … 4,096 (H = 0 and 1), so that ``pair_stage="auto"``'s GPU rule
(``st_magnitude.losses.mw.GPU_PAIRWISE_MAX_PAIRS``, not measured yet) can be set from the first run: the rule
should keep the pairwise sum up to the largest pair count where it is still the faster stage."""

from __future__ import annotations

import statistics
import time

import torch


def _embeddings(batch: int, hard: int, device: str, seed: int) -> list[torch.Tensor]:
    g = torch.Generator(device="cpu").manual_seed(seed)
    unit = lambda x: torch.nn.functional.normalize(x, dim=1)  # noqa: E731
    q = unit(torch.randn(batch, 384, generator=g))
    cols = [q, unit(q + 0.8 * torch.randn(batch, 384, generator=g))]
    for _ in range(hard):
        cols.append(unit(cols[1] + 0.6 * torch.randn(batch, 384, generator=g)))
    return [c.to(device).requires_grad_() for c in cols]


def section_mw_pairs(args, ctx, sync, free, log, load_st) -> list[dict]:
    """Per (B, H): the grid stage and, while its pairs fit ``mw_pairwise_max_pairs``, the pairwise stage, timed in
    alternating rounds (min and median of the synced wall time), and the stage ``"auto"`` takes now."""
    from st_magnitude.losses import MWLoss
    from st_magnitude.losses.mw import choose_pair_stage

    device, sizes = ctx["device"], ctx["sizes"]
    model = load_st(ctx["models"]["minilm"], device)  # the loss reads its similarity only; the scores are given
    rows = []
    for hard in (0, 1):
        for batch in sizes["mw_batches"]:
            cols = _embeddings(batch, hard, device, seed=batch + hard)
            pairs = batch * batch * batch * (1 + hard)
            stages = ["grid"] + (["pairwise"] if pairs <= sizes["mw_pairwise_max_pairs"] else [])
            losses = {s: MWLoss(model, "cosine", temperature=0.01, pair_stage=s) for s in stages}
            times: dict[str, list[float]] = {s: [] for s in stages}
            for round_ in range(sizes["warmup"] + sizes["rounds"]):
                for stage in stages:
                    for c in cols:
                        c.grad = None
                    sync(device)
                    t0 = time.perf_counter()
                    losses[stage].compute_loss_from_embeddings(cols).backward()
                    sync(device)
                    if round_ >= sizes["warmup"]:
                        times[stage].append(time.perf_counter() - t0)
            row = {
                "batch": batch,
                "hard_negatives": hard,
                "pairs": pairs,
                "auto_stage": choose_pair_stage("auto", batch, batch * batch * (1 + hard), cols[0].device),
            }
            for stage in stages:
                row[f"{stage}_s"] = min(times[stage])
                row[f"{stage}_median_s"] = statistics.median(times[stage])
            if "pairwise_s" in row:
                row["faster"] = "pairwise" if row["pairwise_s"] < row["grid_s"] else "grid"
            log(f"mw_pairs: {row}")
            rows.append(row)
            del cols, losses
            free(device)
    del model
    free(device)
    return rows
