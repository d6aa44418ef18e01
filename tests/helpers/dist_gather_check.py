"""Run by ``test_pn_mw_distributed.py`` under ``torchrun --nproc_per_node 2`` (gloo, CPU).

A linear "model" ``E_c = X_c @ W`` on fixed float64 inputs (followed by ST's ``Normalize`` for L2Dir, whose NAP
reads the state before it). Each process takes its half of the batch and runs each loss's real ``forward`` (plain,
and cached with its GradCache backward) with ``gather_across_devices=True``, then back-propagates. Loss and
``W.grad`` are averaged over processes (what DDP does with the model's gradients); the gradients of parameters the
loss holds (learnable γ̂ on a plain model, the L2Dir NAP head) are *not* touched here: the loss must average them
itself. Rank 0 computes the same losses on the full batch in one process and writes the largest differences to the
JSON file named by ``argv[1]``. Last, the processes call a loss with different batch sizes (3 vs 4): both must raise
the package's ``ValueError`` (gloo would abort on the unequal gather).
"""

from __future__ import annotations

import json
import sys
import warnings

import torch
import torch.distributed as dist
from sentence_transformers.base.modules import Normalize
from torch import nn

from st_magnitude.losses import (
    CachedL2DirLoss,
    CachedMWLoss,
    CachedPartialNormInfoNCELoss,
    L2DirLoss,
    MagnitudeMatryoshkaLoss,
    MWLoss,
    PartialNormInfoNCELoss,
)
from st_magnitude.losses._loss_state import loss_held_parameters
from st_magnitude.modules.nap_head import NAPHead

B, H, N_IN, DIM = 8, 2, 5, 4  # global batch 8, 2 hard-negative columns


class LinearStep(nn.Module):
    """features["input_ids"] (float inputs) @ W → features["sentence_embedding"]."""

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight.clone())

    def forward(self, features: dict) -> dict:
        return {**features, "sentence_embedding": features["input_ids"] @ self.weight}


def make_losses(gather: bool, weight: torch.Tensor) -> dict[str, nn.Module]:
    def Linear(w):  # noqa: N802 - a plain (unconverted) model: the losses apply their own similarity
        return nn.Sequential(LinearStep(w))

    out: dict[str, nn.Module] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # learnable γ̂ in the loss, Normalize-free model: on purpose
        raw = dict(gather_across_devices=gather)
        out["infonce_qnorm"] = PartialNormInfoNCELoss(Linear(weight), "qnorm", **raw)
        out["infonce_learnable"] = PartialNormInfoNCELoss(Linear(weight), "learnable", **raw)
        out["infonce_dnorm_cached"] = CachedPartialNormInfoNCELoss(Linear(weight), "dnorm", mini_batch_size=3, **raw)
        out["infonce_learnable_cached"] = CachedPartialNormInfoNCELoss(
            Linear(weight), "learnable", mini_batch_size=3, **raw
        )
        out["mw_cosine_paper"] = MWLoss(Linear(weight), "cosine", temperature=0.05, chunk_size=13, **raw)
        out["mw_qnorm_mean"] = MWLoss(Linear(weight), "qnorm", temperature=0.5, reduction="mean", **raw)
        out["mw_grid_cosine"] = MWLoss(Linear(weight), "cosine", temperature=0.05, pair_stage="grid", **raw)
        out["mw_grid_learnable_cached"] = CachedMWLoss(
            Linear(weight), "dnorm", temperature="learnable", mini_batch_size=3, pair_stage="grid", **raw
        )
        out["mw_learnable_cached"] = CachedMWLoss(
            Linear(weight), "learnable", temperature=0.1, mini_batch_size=3, chunk_size=11, **raw
        )
        # a learnable softmax scale / temperature held by the loss (log_scale): averaged over processes by the loss
        out["infonce_scale_learnable"] = PartialNormInfoNCELoss(Linear(weight), "qnorm", scale="learnable", **raw)
        out["infonce_scale_learnable_cached"] = CachedPartialNormInfoNCELoss(
            Linear(weight), "cosine", scale="learnable", mini_batch_size=3, **raw
        )
        out["mw_temperature_learnable"] = MWLoss(
            Linear(weight), "cosine", temperature="learnable", chunk_size=13, **raw
        )
        out["mw_temperature_learnable_cached"] = CachedMWLoss(
            Linear(weight), "dnorm", temperature="learnable", reduction="mean", mini_batch_size=3, **raw
        )
        # the Matryoshka wrapper around a gathering loss with a loss-held γ̂: the wrapper averages γ̂'s gradient
        shared = Linear(weight)
        inner = PartialNormInfoNCELoss(shared, "learnable", **raw)
        out["matryoshka_learnable"] = MagnitudeMatryoshkaLoss(shared, inner, [DIM, DIM // 2])
        for name, cls, kw in (("l2dir", L2DirLoss, {}), ("l2dir_cached", CachedL2DirLoss, {"mini_batch_size": 3})):
            torch.manual_seed(5)  # the same NAP head everywhere
            head = NAPHead(DIM).double()
            model = nn.Sequential(LinearStep(weight), Normalize())
            out[name] = cls(model, temperature=0.1, tn_temperature=0.1, nap_head=head, **kw, **raw)
            out[name].callback_attached = True
        torch.manual_seed(5)
        model = nn.Sequential(LinearStep(weight), Normalize())
        out["l2dir_temperature_learnable_cached"] = CachedL2DirLoss(
            model,
            temperature="learnable",
            tn_temperature=0.1,
            nap_head=NAPHead(DIM).double(),
            mini_batch_size=3,
            **raw,
        )
        out["l2dir_temperature_learnable_cached"].callback_attached = True
    return {k: v.double() for k, v in out.items()}


def run_loss(loss: nn.Module, inputs: list[torch.Tensor]) -> tuple[float, dict[str, torch.Tensor]]:
    value = loss([{"input_ids": x} for x in inputs], None)
    if isinstance(value, dict):
        value = torch.stack(list(value.values())).sum()
    value.backward()
    return float(value), {n: p.grad.detach().clone() for n, p in loss.named_parameters() if p.grad is not None}


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    g = torch.Generator().manual_seed(0)
    inputs = [torch.randn(B, N_IN, generator=g, dtype=torch.float64) for _ in range(2 + H)]
    weight = torch.randn(N_IN, DIM, generator=g, dtype=torch.float64)
    per = B // world
    local_inputs = [x[rank * per : (rank + 1) * per] for x in inputs]

    report = {}
    distributed = make_losses(True, weight)
    single = make_losses(False, weight)
    for name, loss in distributed.items():
        held = {n for n, p in loss.named_parameters() if any(p is q for q in loss_held_parameters(loss))}
        value, grads = run_loss(loss, local_inputs)
        value_t = torch.tensor(value, dtype=torch.float64)
        dist.all_reduce(value_t)
        value_t /= world
        for n, grad in grads.items():
            if n not in held:  # the model's gradients: averaged as DDP would
                dist.all_reduce(grad)
                grad /= world
        if rank == 0:
            ref_value, ref_grads = run_loss(single[name], inputs)
            assert set(ref_grads) == set(grads), (name, sorted(ref_grads), sorted(grads))
            report[name] = {
                "loss_2proc": float(value_t),
                "loss_1proc": ref_value,
                "loss_abs_diff": abs(float(value_t) - ref_value),
                "grad_max_abs_diff": {n: float((grads[n] - ref_grads[n]).abs().max()) for n in grads},
                "grad_max_abs": {n: float(ref_grads[n].abs().max()) for n in grads},
                "loss_held": sorted(held),
            }

    # unequal per-process batch sizes: a clear error on every process, not a gloo abort
    rows = 3 + rank
    try:
        run_loss(distributed["infonce_qnorm"], [x[:rows] for x in local_inputs])
        unequal = "no error"
    except ValueError as exc:
        unequal = str(exc)
    messages = [None] * world
    dist.all_gather_object(messages, unequal)
    if rank == 0:
        with open(sys.argv[1], "w") as f:
            json.dump({"world": world, "results": report, "unequal_sizes": messages}, f, indent=2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
