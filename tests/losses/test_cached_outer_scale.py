"""Cached losses under the Trainer's real settings: the outer scale reaches *every* parameter.

The Trainer divides the loss by ``gradient_accumulation_steps`` and fp16 training multiplies it by the GradScaler's
scale S before ``backward`` (and divides the gradients by S before the step). A GradCache loss computes its
gradients inside ``forward``; the backbone's part is scaled in ST's backward hook, and the gradient of parameters
the *loss* holds (the learnable similarity's γ̂ on a plain model, the L2Dir NAP head) must be scaled the same way.

Matrix, for every cached loss that owns parameters: (1) a ``SentenceTransformerTrainer`` step with
``gradient_accumulation_steps=2`` moves every parameter (backbone, γ̂, NAP head) exactly as the plain loss does
(plain SGD, no clipping); (2) an fp16-style loss scale (``(S·loss).backward()``, gradients / S) gives the same
gradients as S = 1.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from conftest import TRAIN_SENTENCES, loss_parameters
from torch import nn

from st_magnitude.losses import (
    CachedL2DirLoss,
    CachedMWLoss,
    CachedPartialNormInfoNCELoss,
    L2DirLoss,
    MWLoss,
    PartialNormInfoNCELoss,
)
from st_magnitude.losses._common import LossSimilarityWarning

SENTS = TRAIN_SENTENCES


def _make(name: str, model: nn.Module, cached: bool) -> nn.Module:
    return _make_loss(name, model, cached).double()


def _make_loss(name: str, model: nn.Module, cached: bool) -> nn.Module:
    if name == "infonce_scale":  # a learnable softmax scale held by the loss
        kw = {"scale": "learnable"}
        if cached:
            return CachedPartialNormInfoNCELoss(model, "cosine", mini_batch_size=3, **kw)
        return PartialNormInfoNCELoss(model, "cosine", **kw)
    if name.startswith("mw_temperature"):
        kw = {"temperature": "learnable", "reduction": "mean"}
        kw.update({"pair_stage": "grid"} if name.endswith("grid") else {})
        return CachedMWLoss(model, "cosine", mini_batch_size=3, **kw) if cached else MWLoss(model, "cosine", **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LossSimilarityWarning)  # learnable γ̂ held by the loss: on purpose here
        if name == "infonce":
            if cached:
                return CachedPartialNormInfoNCELoss(model, "learnable", mini_batch_size=3)
            return PartialNormInfoNCELoss(model, "learnable")
        if name.startswith("mw"):
            kw = {"temperature": 0.1, "reduction": "mean"}
            kw.update({"pair_stage": "grid"} if name.endswith("grid") else {})
            if cached:
                return CachedMWLoss(model, "learnable", mini_batch_size=3, **kw)
            return MWLoss(model, "learnable", **kw)
    kw = {"temperature": "learnable" if name == "l2dir_temperature" else 0.05, "tn_temperature": 0.05}
    torch.manual_seed(11)  # the same random NAP head for the plain and the cached loss
    loss = CachedL2DirLoss(model, mini_batch_size=3, **kw) if cached else L2DirLoss(model, **kw)
    loss.callback_attached = True  # no checkpoints in these runs
    return loss


def _model(tiny_bert_dir, name: str):
    from conftest import build_tiny_st

    # no dropout: the plain loss embeds columns merged, the cached one per mini-batch; float64, so "identical" can
    # mean 1e-6 on the parameter moves
    return build_tiny_st(tiny_bert_dir, normalize=name.startswith("l2dir"), dropout=0.0).double()


def _params(loss: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in loss_parameters(loss).items() if p.requires_grad}


LOSS_HELD = {
    "infonce": "similarity_fct.",
    "mw": "similarity_fct.",
    "mw_grid": "similarity_fct.",
    "l2dir": "nap_head.",
    "infonce_scale": "scale.log_scale",
    "mw_temperature": "temperature.log_scale",
    "mw_temperature_grid": "temperature.log_scale",
    "l2dir_temperature": "temperature.log_scale",
}
NAMES = list(LOSS_HELD)


def _train_one_step(tiny_bert_dir, tmp_path, name: str, cached: bool) -> tuple[dict, dict]:
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    model = _model(tiny_bert_dir, name)
    loss = _make(name, model, cached)
    before = _params(loss)
    data = Dataset.from_dict({"anchor": SENTS, "positive": [s.split(" ", 1)[1] + " study" for s in SENTS]})
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path / f"{name}-{cached}"),
        max_steps=1,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        optim="sgd",
        learning_rate=0.5,
        lr_scheduler_type="constant",
        weight_decay=0.0,
        max_grad_norm=0.0,  # no clipping
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        seed=3,
        data_seed=3,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    SentenceTransformerTrainer(model=model, args=args, train_dataset=data, loss=loss).train()
    return before, _params(loss)


@pytest.mark.parametrize("name", NAMES)
def test_trainer_grad_accumulation_moves_every_parameter_like_plain_loss(tiny_bert_dir, tmp_path, name):
    # Given the same model, data order and one SGD step over 2 accumulated micro-batches
    before_p, after_p = _train_one_step(tiny_bert_dir, tmp_path, name, cached=False)
    before_c, after_c = _train_one_step(tiny_bert_dir, tmp_path, name, cached=True)
    assert set(after_p) == set(after_c)
    held = [n for n in after_p if n.startswith(LOSS_HELD[name])]
    assert held, "the loss should own parameters in this test"
    # Then every parameter — backbone and loss-held — moved identically
    for n in after_p:
        torch.testing.assert_close(before_c[n], before_p[n], rtol=0, atol=0, msg=n)
        move_p, move_c = after_p[n] - before_p[n], after_c[n] - before_c[n]
        ratio = float(move_c.norm() / move_p.norm().clamp_min(1e-30))
        assert float((move_c - move_p).abs().max()) <= 1e-6, f"{n}: cached moved {ratio:.3f}x the plain loss"
    # and the loss-held parameters really moved (the comparison is not vacuous)
    assert all(float((after_p[n] - before_p[n]).abs().max()) > 1e-4 for n in held)


def _batch(model, size: int = 5) -> list[dict]:
    return [
        model.preprocess(SENTS[:size]),
        model.preprocess([s.split(" ", 1)[1] for s in SENTS[:size]]),
        model.preprocess(SENTS[-size:][::-1]),
    ]


def _grads(loss: nn.Module, model: nn.Module, scale: float) -> dict[str, torch.Tensor]:
    loss.zero_grad(set_to_none=True)
    value = loss(_batch(model), None)
    if isinstance(value, dict):
        value = torch.stack(list(value.values())).sum()
    (value * scale).backward()  # what GradScaler.scale(loss).backward() does
    return {n: p.grad.detach() / scale for n, p in loss_parameters(loss).items() if p.grad is not None}


@pytest.mark.parametrize("name", NAMES)
def test_fp16_style_loss_scale_reaches_loss_held_parameters(tiny_bert_dir, name):
    # Given a cached loss that owns parameters
    model = _model(tiny_bert_dir, name)
    loss = _make(name, model, cached=True)
    # When the loss is scaled by S before backward and the gradients unscaled after
    unscaled = _grads(loss, model, 1.0)
    scaled = _grads(loss, model, 2.0**12)
    # Then every gradient equals the one at S = 1, loss-held parameters included
    held = [n for n in unscaled if n.startswith(LOSS_HELD[name])]
    assert held and set(scaled) == set(unscaled)
    for n, g in unscaled.items():
        ratio = float(scaled[n].norm() / g.norm().clamp_min(1e-30))
        torch.testing.assert_close(scaled[n], g, rtol=1e-5, atol=1e-7, msg=f"{n}: scaled/unscaled = {ratio:.4f}")


def test_parameter_gradients_accumulate_over_calls(tiny_bert_dir):
    # Given gradients already accumulated from an earlier micro-batch
    model = _model(tiny_bert_dir, "infonce")
    loss = _make("infonce", model, cached=True)
    once = _grads(loss, model, 1.0)
    loss.zero_grad(set_to_none=True)
    for _ in range(2):
        loss(_batch(model), None).backward()
    # Then a second backward adds to them (the earlier gradient is kept, not overwritten)
    params = loss_parameters(loss)
    for n, g in once.items():
        torch.testing.assert_close(params[n].grad, 2 * g, rtol=1e-5, atol=1e-7, msg=n)
