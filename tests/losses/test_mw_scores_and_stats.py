"""MW on the scores users train with: refused when not finite, exact when huge, checked when set; and what it logs.

- Non-finite scores (float32 overflow) are refused by both pair stages in one ``ValueError`` naming the similarity and
  the temperature, in the step's one host read; finite huge scores give the exact loss on the pairwise stage.
- ``chunk_size=True`` (a bool is an int) and a ``pair_stage`` / ``reduction`` set after construction are refused
  with the allowed values.
- With :class:`~st_magnitude.callbacks.LossStatsCallback` MW logs the batch's exact in-batch AUC (against
  ``sklearn.metrics.roc_auc_score``, ties included) and its mean loss per pair, through a real Trainer run too.
"""

from __future__ import annotations

import math
import re
import warnings

import pytest
import torch
from helpers.host_reads import counting_host_reads
from sklearn.metrics import roc_auc_score
from torch.nn.functional import softplus

from st_magnitude import _cpu_shortcuts
from st_magnitude.callbacks import LossStatsCallback
from st_magnitude.losses import CachedMWLoss, MWLoss
from st_magnitude.losses._batch import DUPLICATE_CHECK_FIRST


@pytest.fixture(scope="module")
def model(tiny_bert_dir):
    from conftest import build_tiny_st

    return build_tiny_st(tiny_bert_dir, normalize=False)


def _cols(batch, hard, norm=1.0, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, 8, generator=g, dtype=dtype) * norm for _ in range(2 + hard)]


# --- scores of any magnitude ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("stage", ["grid", "pairwise"])
@pytest.mark.parametrize(
    "temperature,named", [(0.01, "temperature 0.01"), ("learnable", "temperature 'learnable' (now 0.01)")]
)
def test_non_finite_scores_are_refused_by_both_stages_naming_similarity_and_temperature(
    model, stage, temperature, named
):
    loss = MWLoss(model, "dot", temperature=temperature, pair_stage=stage)
    cols = _cols(6, 1, norm=1e20)  # finite float32 embeddings whose dot products overflow to ±inf
    with pytest.raises(ValueError, match=re.escape(f"similarity 'dot', {named})") + ".*not finite"):
        loss.compute_loss_from_embeddings([c.requires_grad_() for c in cols])


@pytest.mark.parametrize("norm", [1e20, 2e18], ids=["inf_score", "overflows_over_tau"])
def test_a_cached_step_refuses_scores_that_overflow_in_any_chunk(model, norm):
    """One query of the last chunk against another anchor's positive: a score of ±inf, or a finite ~1e37 that
    overflows float32 once divided by τ = 0.01."""
    loss = CachedMWLoss(model, "dot", pair_stage="pairwise", mini_batch_size=2)
    cols = _cols(6, 0)
    cols[0][5] *= norm
    cols[1][3] *= norm
    with pytest.raises(ValueError, match="similarity 'dot', temperature 0.01.*not finite or overflows"):
        loss.calculate_loss([[c.requires_grad_()] for c in cols], with_backward=True)


def test_huge_finite_scores_give_the_exact_loss_on_the_pairwise_stage(model):
    """Embeddings of norm 1e9 (scores ~1e17, z ~1e19): every pair in float64 from the same embeddings."""
    loss = MWLoss(model, "dot", temperature=0.01, pair_stage="pairwise")
    cols = _cols(16, 1, norm=1e9)
    leaves = [c.clone().requires_grad_() for c in cols]
    value = loss.compute_loss_from_embeddings(leaves)
    value.backward()
    q, docs = (c.double() for c in (cols[0], torch.cat(cols[1:])))
    scores = q @ docs.T / 0.01
    pos = scores.diagonal()
    mask = ~torch.eye(16, docs.size(0), dtype=torch.bool)
    want = softplus(scores[mask].unsqueeze(0) - pos.unsqueeze(1)).sum() / 16
    value = float(value.detach())
    assert math.isfinite(value) and value == pytest.approx(float(want), rel=1e-6)
    assert all(torch.isfinite(x.grad).all() for x in leaves)


# --- settings checked when given and when assigned -----------------------------------------------------------------
def test_chunk_size_true_is_refused_naming_the_allowed_values(model):
    with pytest.raises(ValueError, match=r"chunk_size must be None \(automatic\) or a positive int.*True"):
        MWLoss(model, "cosine", chunk_size=True)
    with pytest.raises(ValueError, match="chunk_size must be None"):
        CachedMWLoss(model, "cosine", chunk_size=False)


@pytest.mark.parametrize("cached", [False, True])
def test_settings_assigned_after_construction_are_checked(model, cached):
    loss = CachedMWLoss(model, "cosine") if cached else MWLoss(model, "cosine")
    with pytest.raises(ValueError, match=r"pair_stage must be one of \['auto', 'grid', 'pairwise'\], got 'gird'"):
        loss.pair_stage = "gird"
    with pytest.raises(ValueError, match=r"reduction must be one of \['paper', 'mean'\]"):
        loss.reduction = "sum"
    with pytest.raises(ValueError, match="chunk_size must be None"):
        loss.chunk_size = True
    loss.pair_stage, loss.chunk_size = "pairwise", 64
    inner = loss.loss if cached else loss
    assert (inner.pair_stage, inner.chunk_size) == ("pairwise", 64)
    assert loss.get_config_dict()["pair_stage"] == "pairwise"


# --- what MW logs --------------------------------------------------------------------------------------------------
def _sklearn_auc(loss, cols):
    """roc_auc_score over the positives s(q_i, p_i) and every other entry of the score matrix (S⁻)."""
    q, docs = cols[0], torch.cat(cols[1:])
    scores = loss.similarity_fct(q, docs).detach().double()
    b = q.size(0)
    pos = loss.similarity_fct.pairwise(q, cols[1]).detach().double()
    mask = torch.ones_like(scores, dtype=torch.bool)
    mask[torch.arange(b), torch.arange(b)] = False
    neg = scores[mask]
    labels = [1] * pos.numel() + [0] * neg.numel()
    per_pair = softplus((neg.unsqueeze(0) - pos.unsqueeze(1)) / loss.temperature).mean()
    return roc_auc_score(labels, torch.cat([pos, neg]).numpy()), float(per_pair)


def _integer_cols(batch, hard, seed):
    """Small integer embeddings: dot scores are small integers, so many (positive, negative) pairs tie."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(-2, 3, (batch, 4), generator=g).double() for _ in range(2 + hard)]


@pytest.mark.parametrize(
    "stage,mini_batch_size,hard", [("pairwise", None, 0), ("grid", None, 2), ("grid", 3, 1), ("pairwise", 50, 1)]
)
def test_logged_auc_is_sklearns_roc_auc_with_ties_and_loss_per_pair_the_mean(model, stage, mini_batch_size, hard):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = MWLoss(model, "dot", temperature=0.5, pair_stage=stage)
        loss = plain if mini_batch_size is None else CachedMWLoss(model, "dot", 0.5, mini_batch_size=mini_batch_size)
        loss.pair_stage = stage
        LossStatsCallback(loss)  # asks the loss for its statistics
        for seed in (1, 2):
            cols = _integer_cols(10, hard, seed)
            leaves = [c.clone().requires_grad_() for c in cols]
            if mini_batch_size is None:
                loss.compute_loss_from_embeddings(leaves).backward()
            else:
                loss.calculate_loss([[x] for x in leaves], with_backward=True)
            auc, per_pair = _sklearn_auc(plain if mini_batch_size is None else loss.loss, cols)
            assert 0 < auc < 1
            assert loss.last_stats["auc"] == pytest.approx(auc, abs=1e-7)
            assert loss.last_stats["loss_per_pair"] == pytest.approx(per_pair, rel=1e-6)
    assert set(loss.pop_stats()) == {"auc", "loss_per_pair"} and loss.pop_stats() == {}


def test_statistics_cost_nothing_until_asked_for_and_no_host_read_when_they_are(model, monkeypatch):
    """Off by default (they cost a sort); on, a step still reads the host once (the score range), not more."""
    monkeypatch.setattr(_cpu_shortcuts, "ENABLED", False)  # the accelerators' way
    features = _integer_cols(6, 1, 0)
    loss = MWLoss(model, "dot", pair_stage="pairwise")
    loss.compute_loss_from_embeddings([c.requires_grad_() for c in features]).backward()
    assert loss.last_stats == {}
    loss.record_stats = True
    for _ in range(DUPLICATE_CHECK_FIRST):
        loss.compute_loss_from_embeddings([c.clone().requires_grad_() for c in features]).backward()
    with counting_host_reads() as sites:
        loss.compute_loss_from_embeddings([c.clone().requires_grad_() for c in features]).backward()
    assert len(sites) <= loss.host_reads_per_step == 1, sites
    assert set(loss.last_stats) == {"auc", "loss_per_pair"}


@pytest.mark.parametrize("cached", [False, True], ids=["plain", "cached"])
def test_a_trainer_run_logs_the_auc_and_the_loss_per_pair(tiny_bert_dir, sentences, tmp_path, cached):
    from conftest import build_tiny_st, cpu_training_args
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer

    model = build_tiny_st(tiny_bert_dir)
    loss = CachedMWLoss(model, mini_batch_size=3) if cached else MWLoss(model)
    data = Dataset.from_dict({"anchor": sentences[:8], "positive": [s.split()[-1] + " " + s for s in sentences[:8]]})
    args = cpu_training_args(tmp_path, max_steps=2, per_device_train_batch_size=8, logging_steps=1, save_strategy="no")
    trainer = SentenceTransformerTrainer(
        model=model, args=args, train_dataset=data, loss=loss, callbacks=[LossStatsCallback(loss)]
    )
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 2 and all({"mw_auc", "mw_loss_per_pair"} <= set(h) for h in logs)
    assert all(0 <= h["mw_auc"] <= 1 and h["mw_loss_per_pair"] > 0 for h in logs)
