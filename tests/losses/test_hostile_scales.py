"""Loss constructors refuse a non-finite or non-positive scale / temperature; the recipe losses refuse degenerate
batches like the rest of the family.

Before: ``PartialNormInfoNCELoss(scale=inf)`` and ``MWLoss(temperature=inf)`` built and returned NaN losses,
``EttinRecipeLoss(temperature=0)`` divided by zero, ``RevelaLoss`` took ``nan``; ``EttinRecipeLoss`` scored a single
(anchor, positive) pair as 0 (docs/losses.md: such a batch raises) and both recipe losses passed an empty batch to
the model (transformers' "You must specify exactly one of input_ids or inputs_embeds").
"""

from __future__ import annotations

import math

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
from st_magnitude.losses._checks import positive_finite

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


@pytest.fixture(scope="module")
def tiny_model(tiny_bert_dir):
    from conftest import build_tiny_st

    return build_tiny_st(tiny_bert_dir, normalize=True)


@pytest.mark.parametrize("bad", BAD, ids=repr)
@pytest.mark.parametrize("case", list(BUILD), ids="-".join)
def test_constructor_refuses_and_names_the_range(tiny_model, case, bad):
    _, arg = case
    with pytest.raises(ValueError, match=rf"{arg} \(.*\) must be a finite number in 0 < {arg} < inf, got"):
        BUILD[case](tiny_model, bad)


def test_the_check_passes_learnable_through_and_accepts_positive_numbers():
    assert positive_finite("temperature", "learnable") == "learnable"  # a learnable temperature is the loss's job
    assert positive_finite("scale", 20) == 20.0 and isinstance(positive_finite("scale", 20), float)
    assert positive_finite("scale", 1e-300) == 1e-300


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
