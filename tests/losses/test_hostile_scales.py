"""Loss constructors refuse a scale / temperature outside ``[1e-6, 1e6]`` (non-finite, non-positive, or one that
overflows float32); the recipe losses refuse degenerate batches like the rest of the family.

Before: ``PartialNormInfoNCELoss(scale=inf)`` and ``MWLoss(temperature=inf)`` built and returned NaN losses,
``EttinRecipeLoss(temperature=0)`` divided by zero, ``RevelaLoss`` took ``nan``; ``EttinRecipeLoss`` scored a single
(anchor, positive) pair as 0 (docs/losses.md: such a batch raises) and both recipe losses passed an empty batch to
the model (transformers' "You must specify exactly one of input_ids or inputs_embeds"). Values that passed
``0 < x < inf`` still broke float32: ``scale=1e308`` gave a NaN loss, ``temperature=5e-324`` an infinite or NaN one,
and ``10**400`` raised ``OverflowError`` instead of the error naming the range.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from st_magnitude.losses import (
    BertRecipeLoss,
    CachedL2DirLoss,
    CachedMWLoss,
    CachedPartialNormInfoNCELoss,
    EttinRecipeLoss,
    InfoTNLoss,
    L2DirLoss,
    MarginContrastiveLoss,
    MWLoss,
    PartialNormInfoNCELoss,
    RevelaLoss,
)
from st_magnitude.losses._checks import SAFE_RANGE, positive_finite, positive_float32

SENTS = ["the protein in cancer cell", "vitamin diet and heart risk", "coffee tea sleep", "exercise weight trial"]

#: (loss, the argument) -> a constructor taking the model and the value
BUILD = {
    ("PartialNormInfoNCELoss", "scale"): lambda m, v: PartialNormInfoNCELoss(m, "cosine", scale=v),
    ("CachedPartialNormInfoNCELoss", "scale"): lambda m, v: CachedPartialNormInfoNCELoss(m, "cosine", scale=v),
    ("MWLoss", "temperature"): lambda m, v: MWLoss(m, "cosine", temperature=v),
    ("CachedMWLoss", "temperature"): lambda m, v: CachedMWLoss(m, "cosine", temperature=v),
    ("L2DirLoss", "temperature"): lambda m, v: L2DirLoss(m, temperature=v),
    ("L2DirLoss", "tn_temperature"): lambda m, v: L2DirLoss(m, tn_temperature=v),
    ("CachedL2DirLoss", "temperature"): lambda m, v: CachedL2DirLoss(m, temperature=v),
    ("CachedL2DirLoss", "tn_temperature"): lambda m, v: CachedL2DirLoss(m, tn_temperature=v),
    ("InfoTNLoss", "temperature"): lambda m, v: InfoTNLoss(m, temperature=v, warn_collapse=False),
    ("MarginContrastiveLoss", "scale"): lambda m, v: MarginContrastiveLoss(m, scale=v),
    ("EttinRecipeLoss", "temperature"): lambda m, v: EttinRecipeLoss(m, temperature=v),
    ("RevelaLoss", "temperature"): lambda m, v: RevelaLoss(m, torch.nn.Linear(1, 1), temperature=v),
    ("RevelaLoss", "eps"): lambda m, v: RevelaLoss(m, torch.nn.Linear(1, 1), eps=v),
}
BAD = [math.inf, -math.inf, math.nan, 0, 0.0, -1.0, True, "0.1", None]
#: pass ``0 < x < inf`` but overflow float32 once the loss multiplies or divides by them (or are no float at all)
OVERFLOWING = [1e308, 5e-324, 1e-300, 1e-320, 10**400, -(10**400), 2**1024, 1e7, 1e-7]


@pytest.fixture(scope="module")
def tiny_model(tiny_bert_dir):
    from conftest import build_tiny_st

    return build_tiny_st(tiny_bert_dir, normalize=True)


def _range_of(arg: str) -> str:
    if arg == "eps":  # no scale: any positive normal float32 up to 1
        return r"1\.175e-38 ≤ eps ≤ 1"
    return rf"1e-06 ≤ {arg} ≤ 1e\+06"


@pytest.mark.parametrize("bad", BAD, ids=repr)
@pytest.mark.parametrize("case", list(BUILD), ids="-".join)
def test_constructor_refuses_and_names_the_range(tiny_model, case, bad):
    _, arg = case
    with pytest.raises(ValueError, match=rf"{arg} \(.*\) must be a finite number in {_range_of(arg)}, got"):
        BUILD[case](tiny_model, bad)


@pytest.mark.parametrize("bad", OVERFLOWING, ids=lambda v: f"{v:.3g}" if isinstance(v, float) else f"int{len(str(v))}")
@pytest.mark.parametrize("case", list(BUILD), ids="-".join)
def test_values_that_overflow_float32_are_refused_naming_the_range(tiny_model, case, bad):
    _, arg = case
    if arg == "eps" and isinstance(bad, float) and 1.2e-38 <= bad <= 1:  # 1e-7 is a fine eps
        assert positive_float32("eps", bad) == bad
        return
    with pytest.raises(ValueError, match=rf"{arg} \(.*\) must be a finite number in {_range_of(arg)}, got") as info:
        BUILD[case](tiny_model, bad)
    assert type(info.value) is ValueError  # never an OverflowError
    assert len(str(info.value)) < 300  # a 400-digit integer is described, not printed


def test_the_check_passes_learnable_through_and_accepts_the_range():
    assert positive_finite("temperature", "learnable") == "learnable"  # a learnable temperature is the loss's job
    assert positive_finite("scale", 20) == 20.0 and isinstance(positive_finite("scale", 20), float)
    assert positive_finite("scale", 10**6) == 1e6 and positive_finite("scale", 1e-6) == 1e-6
    for outside in (1e-300, 1.0000001e6, 9.99e-7):
        with pytest.raises(ValueError, match=r"1e-06 ≤ scale ≤ 1e\+06"):
            positive_finite("scale", outside)
    assert positive_float32("eps", 1e-30) == 1e-30
    with pytest.raises(ValueError, match="eps"):
        positive_float32("eps", 1e-40)  # a float32 subnormal: 1e-45 and below is 0


#: every loss of BUILD that can run on the tiny model (Revela needs a language model; Margin-MSE hard negatives)
RUNNABLE = {
    **{case: build for case, build in BUILD.items() if case[0] != "RevelaLoss"},
    ("MarginContrastiveLoss", "scale"): lambda m, v: MarginContrastiveLoss(m, scale=v, margin_mse_weight=0.0),
}


def _run(loss, model) -> torch.Tensor:
    features = [model.preprocess(SENTS), model.preprocess(SENTS[::-1])]
    out = loss(features, None)
    return sum(out.values()) if isinstance(out, dict) else out


@pytest.mark.parametrize("value", SAFE_RANGE, ids=["lo", "hi"])
@pytest.mark.parametrize("case", list(RUNNABLE), ids="-".join)
def test_both_ends_of_the_range_give_a_finite_loss_and_gradient(tiny_bert_dir, case, value):
    from conftest import build_tiny_st

    # Given a model that is not normalized (dot scores) and a loss at one end of the range
    model = build_tiny_st(tiny_bert_dir, normalize=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # L2Dir: "training a NAP head that sentence-transformers does not save"
        loss = RUNNABLE[case](model, value)
        value_ = _run(loss, model)
    value_.backward()
    # Then its value and every gradient are finite
    assert torch.isfinite(value_), (case, value, value_)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)


def test_the_float32_arithmetic_the_range_guards_against():
    # an independent reference for why the range exists: what the loss does to a float32 score
    score = torch.tensor([1.5, -0.5], dtype=torch.float32)
    assert not torch.isfinite(score * 1e308).all()  # a scale of 1e308: inf logits, NaN softmax
    assert not torch.isfinite(score / 5e-324).all()  # a temperature of 5e-324 is 0 in float32
    assert torch.isfinite(score * SAFE_RANGE[1] * 1e25).all()  # the top of the range leaves room for scores of 1e25
    assert torch.isfinite(score / SAFE_RANGE[0]).all()


@pytest.mark.parametrize(
    ("cls", "kw"),
    [(PartialNormInfoNCELoss, {"scale": SAFE_RANGE[1]}), (CachedMWLoss, {"temperature": SAFE_RANGE[0]})],
    ids=["infonce-scale-1e6", "cached-mw-temperature-1e-6"],
)
def test_the_trainer_trains_finitely_at_the_end_of_the_range(tiny_bert_dir, tmp_path, cls, kw):
    from conftest import TRAIN_SENTENCES, build_tiny_st, cpu_training_args
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer

    model = build_tiny_st(tiny_bert_dir, normalize=False)
    extra = {"mini_batch_size": 2} if cls is CachedMWLoss else {}
    loss = cls(model, "dot", **kw, **extra)
    data = Dataset.from_dict({"anchor": TRAIN_SENTENCES, "positive": [s.split(" ", 1)[1] for s in TRAIN_SENTENCES]})
    args = cpu_training_args(
        tmp_path, max_steps=2, per_device_train_batch_size=4, logging_steps=1, save_strategy="no", disable_tqdm=True
    )
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=data, loss=loss)
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 2 and all(math.isfinite(v) for v in losses)
    assert all(torch.isfinite(p).all() for p in model.parameters())


RECIPES = {
    "EttinRecipeLoss": lambda m: EttinRecipeLoss(m),
    "BertRecipeLoss": lambda m: BertRecipeLoss(m),
    "MarginContrastiveLoss": lambda m: MarginContrastiveLoss(m, margin_mse_weight=0.0),
}


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_losses_refuse_an_empty_batch(tiny_model, name):
    loss = RECIPES[name](tiny_model)
    with pytest.raises(ValueError, match="the batch is empty"):
        loss([tiny_model.preprocess([]), tiny_model.preprocess([])], None)


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_losses_refuse_one_pair_without_negatives(tiny_model, name):
    loss = RECIPES[name](tiny_model)
    with pytest.raises(ValueError, match="no negatives"):
        loss([tiny_model.preprocess(SENTS[:1]), tiny_model.preprocess(SENTS[1:2])], None)


def test_ettin_scores_one_pair_with_a_hard_negative(tiny_model):
    loss = EttinRecipeLoss(tiny_model)  # every in-batch passage is a candidate: the hard negative is one
    out = loss([tiny_model.preprocess([s]) for s in SENTS[:3]], None)
    value = sum(out.values())
    assert torch.isfinite(value) and float(value) > 0


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_losses_refuse_columns_with_different_row_counts(tiny_model, name):
    loss = RECIPES[name](tiny_model)
    with pytest.raises(ValueError, match="one row per anchor"):
        loss([tiny_model.preprocess(SENTS[:3]), tiny_model.preprocess(SENTS[:2])], None)
