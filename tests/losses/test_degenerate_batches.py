"""Degenerate batches give one clear error, never a silent number, a bare StopIteration or an IndexError.

Covered for every loss of the family (plain and cached): an empty batch; columns with different row counts
(3 vs 4 and 4 vs 3); one (anchor, positive) pair without negatives; NaN / inf embeddings (the error names the
column and the batch rows).
"""

from __future__ import annotations

import warnings

import pytest
import torch

from st_magnitude.losses import (
    CachedL2DirLoss,
    CachedMWLoss,
    CachedPartialNormInfoNCELoss,
    InfoTNLoss,
    L2DirLoss,
    MWLoss,
    PartialNormInfoNCELoss,
)
from st_magnitude.losses.info_tn import InfoTNCollapseWarning

SENTS = ["the protein in cancer cell", "vitamin diet and heart risk", "coffee tea sleep", "exercise weight trial"]

LOSSES = {
    "infonce": lambda m: PartialNormInfoNCELoss(m, "cosine"),
    "infonce_cached": lambda m: CachedPartialNormInfoNCELoss(m, "cosine", mini_batch_size=2),
    "mw": lambda m: MWLoss(m, "cosine"),
    "mw_cached": lambda m: CachedMWLoss(m, "cosine", mini_batch_size=2),
    "l2dir": lambda m: L2DirLoss(m),
    "l2dir_cached": lambda m: CachedL2DirLoss(m, mini_batch_size=2),
    "infotn": lambda m: InfoTNLoss(m, warn_collapse=False),
}


@pytest.fixture(scope="module")
def tiny_model(tiny_bert_dir):
    """One model for the module: these tests never train it (a forward per test, then an error)."""
    from conftest import build_tiny_st

    return build_tiny_st(tiny_bert_dir, normalize=True)


def _call(loss, features):
    out = loss(features, None)
    return torch.stack(list(out.values())).sum() if isinstance(out, dict) else out


@pytest.mark.parametrize("name", LOSSES)
def test_empty_batch_raises_clearly(tiny_model, name):
    loss = LOSSES[name](tiny_model)
    with pytest.raises(ValueError, match="the batch is empty"):
        _call(loss, [tiny_model.preprocess([]), tiny_model.preprocess([])])


@pytest.mark.parametrize("rows", [(3, 4), (4, 3), (4, 4, 3)])
@pytest.mark.parametrize("name", LOSSES)
def test_columns_with_different_row_counts_raise(tiny_model, name, rows):
    loss = LOSSES[name](tiny_model)
    features = [tiny_model.preprocess(SENTS[:n]) for n in rows]
    with pytest.raises(ValueError, match=r"one row per anchor.*anchor \d, positive \d"):
        _call(loss, features)


@pytest.mark.parametrize("name", LOSSES)
def test_one_pair_without_negatives_raises(tiny_model, name):
    loss = LOSSES[name](tiny_model)
    with pytest.raises(ValueError, match="no negatives"):
        _call(loss, [tiny_model.preprocess(SENTS[:1]), tiny_model.preprocess(SENTS[1:2])])


def test_one_pair_with_a_hard_negative_is_fine(tiny_model):
    loss = L2DirLoss(tiny_model)
    value = _call(loss, [tiny_model.preprocess([s]) for s in SENTS[:3]])
    assert torch.isfinite(value) and float(value) > 0


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("name", ["infonce", "mw", "l2dir", "infonce_cached", "mw_cached", "l2dir_cached"])
def test_non_finite_embeddings_raise_with_their_position(tiny_model, name, bad):
    # Given a model whose output for one input is NaN/inf (e.g. an fp16 overflow)
    loss = LOSSES[name](tiny_model)
    poisoned = {"positive": 2}

    def poison(module, args, output):
        texts = output["input_ids"]
        row = next((i for i in range(texts.size(0)) if int(texts[i].sum()) == poisoned["sum"]), None)
        if row is not None:
            output["sentence_embedding"] = output["sentence_embedding"].clone()
            output["sentence_embedding"][row, 0] = bad
        return output

    positives = ["fish fat acid", "milk egg", "gene dose level", "brain memory"]
    features = [tiny_model.preprocess(SENTS), tiny_model.preprocess(positives)]
    poisoned["sum"] = int(features[1]["input_ids"][2].sum())  # column 1 (positive), row 2
    handle = tiny_model.register_forward_hook(poison)
    try:
        # Then the loss raises, naming the column and the row
        with pytest.raises(ValueError, match=r"NaN or infinite in column 1 \(positive\) rows \[2\]"):
            _call(loss, features)
    finally:
        handle.remove()


def test_non_finite_direct_embeddings_name_every_bad_row():
    loss = PartialNormInfoNCELoss(torch.nn.Sequential(), "dot")
    a, p, n = torch.randn(5, 3), torch.randn(5, 3), torch.randn(5, 3)
    n[1, 0], n[4, 2] = float("nan"), float("-inf")
    with pytest.raises(ValueError, match=r"column 2 \(negative_1\) rows \[1, 4\]"):
        loss.compute_loss_from_embeddings([a, p, n])


def test_infotn_collapse_warning_still_raised(tiny_model):
    with pytest.warns(InfoTNCollapseWarning):
        InfoTNLoss(tiny_model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", InfoTNCollapseWarning)
        InfoTNLoss(tiny_model, warn_collapse=False)


def test_margin_contrastive_checks_columns_and_finiteness():
    from st_magnitude.losses import EttinRecipeLoss

    loss = EttinRecipeLoss(torch.nn.Sequential())
    q, p = torch.randn(4, 3), torch.randn(3, 3)
    with pytest.raises(ValueError, match="anchor 4, positive 3"):
        loss.compute_loss_from_embeddings([q, p], None)
    p = torch.randn(4, 3)
    p[3, 1] = float("nan")
    with pytest.raises(ValueError, match=r"column 1 \(positive\) rows \[3\]"):
        loss.compute_loss_from_embeddings([q, p], None)


def test_the_deferred_finite_check_reads_its_flag_once_per_interval_and_names_the_rows_when_it_can():
    """On an accelerator the loss accumulates its finiteness flag on the device and reads it (one host sync) every
    FINITE_CHECK_INTERVAL calls; the class works on any device, so it is exercised here on CPU tensors."""
    from st_magnitude.losses import _batch

    good = [torch.randn(4, 3), torch.randn(4, 3)]
    bad = [good[0], good[1].clone()]
    bad[1][2, 0] = float("nan")
    check = _batch.FiniteCheck()
    # Given a NaN batch early in an interval: nothing is read (no sync) until the interval ends
    check(bad, "L", "embeddings")
    for _ in range(_batch.FINITE_CHECK_INTERVAL - 2):
        check(good, "L", "embeddings")
    # Then the read at the end of the interval raises, saying the batch is among the last ones
    with pytest.raises(ValueError, match=rf"at least one of the last {_batch.FINITE_CHECK_INTERVAL} batches"):
        check(good, "L", "embeddings")
    # and when the batch at the read is the bad one, the error names its rows
    for _ in range(_batch.FINITE_CHECK_INTERVAL - 1):
        check(good, "L", "embeddings")
    with pytest.raises(ValueError, match=r"column 1 \(positive\) rows \[2\]"):
        check(bad, "L", "embeddings")
    # a clean interval passes
    for _ in range(_batch.FINITE_CHECK_INTERVAL):
        check(good, "L", "embeddings")


def test_the_duplicate_check_runs_on_the_first_calls_then_once_per_interval(caplog):
    from st_magnitude.losses import _batch

    unique, dup = torch.eye(4), torch.stack([torch.eye(4)[0]] * 4)
    check = _batch.DuplicateCheck()
    for _ in range(_batch.DUPLICATE_CHECK_FIRST):
        check(unique, "L")
    with caplog.at_level("WARNING", logger=_batch.__name__):
        check(dup, "L")  # a call between two sampled ones: not checked
        assert "exact duplicates" not in caplog.text
        for _ in range(_batch.DUPLICATE_CHECK_INTERVAL - _batch.DUPLICATE_CHECK_FIRST - 2):
            check(unique, "L")
        check(dup, "L")  # the sampled call
    assert "3 of 4 positives in this batch are exact duplicates" in caplog.text
