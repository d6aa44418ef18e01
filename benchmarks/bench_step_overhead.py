"""Per-step overhead of our losses against sentence-transformers' own, side by side as ratios.

One step is ``compute_loss_from_embeddings`` + ``backward`` on fixed embeddings (seeded, ``requires_grad``): the
model is left out, so what differs is only the loss's own work — the similarity, the checks it runs on each batch
(finiteness, duplicate positives) and the gathering logic. Compared: ``PartialNormInfoNCELoss`` (cosine, scale 20)
against ``MultipleNegativesRankingLoss`` (the same loss in ST: cosine, scale 20), and ``MWLoss`` (cosine) against the
same MNRL, at each ``--batch`` with ``--negatives`` hard negatives. Ratios are ours / MNRL, of wall time and of
CPU-seconds (the steadier one on a shared machine). Times are medians over ``--repeats`` alternating
rounds of ``--steps`` steps after one warm-up round; CPU-seconds (``time.process_time``) are printed beside wall
time. Run::

    python benchmarks/bench_step_overhead.py --threads 1
    python benchmarks/bench_step_overhead.py --device cuda     # where the host syncs the checks avoid matter
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn


def _step(loss: nn.Module, columns: list[torch.Tensor], labels: torch.Tensor) -> None:
    for c in columns:
        c.grad = None
    loss.compute_loss_from_embeddings(columns, labels).backward()


def _round(loss, columns, labels, steps: int, device: str) -> tuple[float, float]:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        _step(loss, columns, labels)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return (time.perf_counter() - wall) / steps, (time.process_time() - cpu) / steps


def measure(losses: dict[str, nn.Module], columns, labels, steps: int, repeats: int, device: str) -> dict[str, tuple]:
    for loss in losses.values():
        _round(loss, columns, labels, steps, device)  # warm-up
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in losses}
    for _ in range(repeats):  # alternate, so drift on a shared machine hits every loss alike
        for name, loss in losses.items():
            times[name].append(_round(loss, columns, labels, steps, device))
    return {n: (statistics.median(w for w, _ in t), statistics.median(c for _, c in t)) for n, t in times.items()}


def main(argv: list[str] | None = None) -> None:
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    from st_magnitude.losses import MWLoss, PartialNormInfoNCELoss

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, nargs="+", default=[32, 128])
    p.add_argument("--negatives", type=int, default=1)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model = nn.Sequential()  # the losses only read the model to resolve the similarity; no forward runs
    losses = {
        "MNRL (ST)": MultipleNegativesRankingLoss(model, scale=20.0),
        "PartialNormInfoNCE": PartialNormInfoNCELoss(model, similarity="cosine", scale=20.0),
        "MW": MWLoss(model, similarity="cosine"),
    }
    print(
        f"device {args.device}, dim {args.dim}, {args.negatives} hard negative(s), {args.steps} steps × "
        f"{args.repeats} rounds (median), ms per step: wall / CPU"
    )
    print(
        f"{'batch':>6} | {'MNRL (ST)':>15} | {'PartialNormInfoNCE':>18} | {'ratio wall/CPU':>14} | {'MW':>15} | "
        f"{'ratio wall/CPU':>14}"
    )
    gen = torch.Generator().manual_seed(0)
    for batch in args.batch:
        columns = [
            torch.randn(batch, args.dim, generator=gen).to(args.device).requires_grad_()
            for _ in range(2 + args.negatives)
        ]
        labels = torch.zeros(batch, device=args.device)
        res = measure(losses, columns, labels, args.steps, args.repeats, args.device)
        base = res["MNRL (ST)"]

        def cell(name: str) -> str:
            wall, cpu = res[name]
            return f"{wall * 1e3:7.3f} / {cpu * 1e3:6.3f}"

        def ratio(name: str) -> str:
            return f"{res[name][0] / base[0]:.2f} / {res[name][1] / base[1]:.2f}"

        ours = f"{cell('PartialNormInfoNCE'):>18} | {ratio('PartialNormInfoNCE'):>14}"
        print(f"{batch:>6} | {cell('MNRL (ST)'):>15} | {ours} | {cell('MW'):>15} | {ratio('MW'):>14}")


if __name__ == "__main__":
    main()
