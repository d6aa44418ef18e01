"""Run by ``test_pn_mw_distributed.py`` under ``torchrun --nproc_per_node 2`` (gloo, CPU).

A linear "model" ``E_c = X_c @ W`` on fixed float64 inputs. Each process takes its half of the batch, computes each
loss with ``gather_across_devices=True`` and back-propagates; loss and ``W.grad`` are then averaged over processes
(what DDP does with gradients). Rank 0 also computes the same loss on the full batch in one process, and writes
the largest differences to the JSON file named by ``argv[1]``.
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist
from torch import nn

from st_magnitude.losses import CachedMWLoss, CachedPartialNormInfoNCELoss, MWLoss, PartialNormInfoNCELoss

B, H, N_IN, DIM = 8, 2, 5, 4  # global batch 8, 2 hard-negative columns


def make_losses(gather: bool) -> dict[str, nn.Module]:
    dummy = nn.Sequential()  # a plain (unconverted) model: the losses apply their own similarity
    return {
        "infonce_qnorm": PartialNormInfoNCELoss(dummy, "qnorm", gather_across_devices=gather),
        "infonce_dnorm_cached": CachedPartialNormInfoNCELoss(
            dummy, "dnorm", mini_batch_size=3, gather_across_devices=gather
        ),
        "mw_cosine_paper": MWLoss(dummy, "cosine", temperature=0.05, gather_across_devices=gather, chunk_size=13),
        "mw_qnorm_mean": MWLoss(dummy, "qnorm", temperature=0.5, reduction="mean", gather_across_devices=gather),
        "mw_cosine_cached": CachedMWLoss(
            dummy, "cosine", temperature=0.05, mini_batch_size=3, chunk_size=11, gather_across_devices=gather
        ),
    }


def run_loss(loss: nn.Module, inputs: list[torch.Tensor], weight: torch.Tensor) -> tuple[float, torch.Tensor]:
    w = weight.clone().requires_grad_()
    embeddings = [x @ w for x in inputs]
    if hasattr(loss, "calculate_loss"):  # GradCache: loss on detached embeddings, then push the cached gradients
        mb = loss.mini_batch_size
        reps = [[e[i : i + mb].detach().requires_grad_() for i in range(0, e.size(0), mb)] for e in embeddings]
        value = loss.calculate_loss(reps, None, with_backward=True)
        for e, col in zip(embeddings, reps):
            e.backward(torch.cat([r.grad for r in col]))
    else:
        value = loss.compute_loss_from_embeddings(embeddings, None)
        value.backward()
    return float(value), w.grad.detach().clone()


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    g = torch.Generator().manual_seed(0)
    inputs = [torch.randn(B, N_IN, generator=g, dtype=torch.float64) for _ in range(2 + H)]
    weight = torch.randn(N_IN, DIM, generator=g, dtype=torch.float64)
    per = B // world
    local_inputs = [x[rank * per : (rank + 1) * per] for x in inputs]

    report = {}
    distributed = make_losses(gather=True)
    single = make_losses(gather=False)
    for name, loss in distributed.items():
        value, grad = run_loss(loss, local_inputs, weight)
        value_t = torch.tensor(value, dtype=torch.float64)
        dist.all_reduce(value_t)
        dist.all_reduce(grad)
        value_t /= world
        grad /= world
        if rank == 0:
            ref_value, ref_grad = run_loss(single[name], inputs, weight)
            report[name] = {
                "loss_2proc": float(value_t),
                "loss_1proc": ref_value,
                "loss_abs_diff": abs(float(value_t) - ref_value),
                "grad_max_abs_diff": float((grad - ref_grad).abs().max()),
                "grad_max_abs": float(ref_grad.abs().max()),
            }
    if rank == 0:
        with open(sys.argv[1], "w") as f:
            json.dump({"world": world, "results": report}, f, indent=2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
