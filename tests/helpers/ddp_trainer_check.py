"""Run by ``test_ddp_trainer.py``: one ``SentenceTransformerTrainer`` SGD step over a dataset of 8 pairs.

Under ``torchrun --nproc_per_node 2`` (gloo, CPU, DDP) each process gets 4 pairs and the losses gather the global
batch; in one process (no torchrun) the same 8 pairs form one batch. All losses here are invariant to the order of
the rows, so after the step every parameter — the backbone, the learnable γ̂ held by the loss, the L2Dir NAP head —
must be the same in both runs. Writes ``{name: {param: tensor list}}`` (rank 0) to ``argv[2]``; ``argv[1]`` is a
tiny BERT folder.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

import torch
from datasets import Dataset
from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments
from torch import nn

from st_magnitude.losses import CachedL2DirLoss, CachedMWLoss, CachedPartialNormInfoNCELoss, L2DirLoss, MWLoss

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared tiny-model kit
from conftest import TRAIN_SENTENCES as SENTS  # noqa: E402
from conftest import build_tiny_st, loss_parameters  # noqa: E402


def build(hf_dir: str, normalize: bool) -> SentenceTransformer:
    return build_tiny_st(Path(hf_dir), normalize=normalize, dropout=0.0).double()


def make(name: str, model: SentenceTransformer, gather: bool) -> nn.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name == "infonce_scale_learnable_cached":  # a learnable softmax scale held by the loss
            return CachedPartialNormInfoNCELoss(
                model, "cosine", scale="learnable", mini_batch_size=3, gather_across_devices=gather
            )
        if name == "mw_temperature_learnable":
            return MWLoss(model, "cosine", temperature="learnable", reduction="mean", gather_across_devices=gather)
        if name == "infonce_learnable_cached":
            return CachedPartialNormInfoNCELoss(model, "learnable", mini_batch_size=3, gather_across_devices=gather)
        if name == "mw_learnable_cached":
            kw = {"temperature": 0.1, "reduction": "mean", "mini_batch_size": 3}
            return CachedMWLoss(model, "learnable", gather_across_devices=gather, **kw)
    torch.manual_seed(11)
    kw = {"temperature": 0.05, "tn_temperature": 0.05, "gather_across_devices": gather}
    loss = CachedL2DirLoss(model, mini_batch_size=3, **kw) if name == "l2dir_cached" else L2DirLoss(model, **kw)
    loss.callback_attached = True
    return loss


NAMES = (
    "infonce_learnable_cached",
    "mw_learnable_cached",
    "l2dir",
    "l2dir_cached",
    "infonce_scale_learnable_cached",
    "mw_temperature_learnable",
)


def main() -> None:
    hf_dir, out_path = sys.argv[1], sys.argv[2]
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    results = {}
    for name in NAMES:
        model = build(hf_dir, normalize=name.startswith("l2dir") or "_scale_" in name or "_temperature_" in name)
        loss = make(name, model, gather=distributed).double()
        data = Dataset.from_dict({"anchor": SENTS, "positive": [s.split(" ", 1)[1] + " study" for s in SENTS]})
        args = SentenceTransformerTrainingArguments(
            output_dir=os.path.join(os.path.dirname(out_path), f"run-{name}-{int(distributed)}"),
            max_steps=1,
            per_device_train_batch_size=4 if distributed else 8,
            optim="sgd",
            learning_rate=0.5,
            lr_scheduler_type="constant",
            weight_decay=0.0,
            max_grad_norm=0.0,
            save_strategy="no",
            report_to="none",
            use_cpu=True,
            seed=3,
            dataloader_num_workers=0,
            disable_tqdm=True,
            ddp_backend="gloo" if distributed else None,
        )
        SentenceTransformerTrainer(model=model, args=args, train_dataset=data, loss=loss).train()
        params = loss_parameters(loss).items()  # a cached loss: its plain loss's names
        results[name] = {n.replace("model.module.", "model."): p.detach().flatten().tolist() for n, p in params}
    if int(os.environ.get("RANK", "0")) == 0:
        with open(out_path, "w") as f:
            json.dump(results, f)


if __name__ == "__main__":
    main()
