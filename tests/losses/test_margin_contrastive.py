"""Paper 003 recipes: brute-force references, ST equivalences, label handling, teachers, training smoke."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
from sentence_transformers.util import cos_sim

from st_magnitude.losses.bert_recipe import BertRecipeLoss
from st_magnitude.losses.ettin_recipe import EttinRecipeLoss
from st_magnitude.losses.margin_contrastive import MarginContrastiveLoss, teacher_scores


def _embeddings(B=4, k=3, m=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, m, generator=g) for _ in range(2 + k)]


def _dot(a, b):
    return sum(float(x) * float(y) for x, y in zip(a, b))


def _bert_reference(embs, teacher):
    """Paper eqs. 1–3 with Python loops: Margin-MSE over B·k pairs + CE over the batch's positives."""
    q, pos, negs = embs[0], embs[1], embs[2:]
    B, k = q.shape[0], len(negs)
    mse = 0.0
    for b in range(B):
        for j in range(k):
            student = _dot(q[b], pos[b]) - _dot(q[b], negs[j][b])
            t = teacher[b][0] - teacher[b][1 + j]
            mse += (student - t) ** 2
    mse /= B * k
    ce = 0.0
    for b in range(B):
        logits = [_dot(q[b], pos[c]) for c in range(B)]
        ce += -logits[b] + math.log(sum(math.exp(v) for v in logits))
    return mse, ce / B


def _ettin_reference(embs, tau):
    q, cands = embs[0], torch.cat(embs[1:], dim=0)
    B = q.shape[0]
    ce = 0.0
    for b in range(B):
        qn = q[b] / q[b].norm()
        logits = [_dot(qn, c / c.norm()) / tau for c in cands]
        ce += -logits[b] + math.log(sum(math.exp(v) for v in logits))
    return ce / B


def test_bert_recipe_matches_brute_force(tiny_model_raw):
    embs = _embeddings()
    teacher = torch.randn(4, 4, generator=torch.Generator().manual_seed(1)) * 3
    out = BertRecipeLoss(tiny_model_raw).compute_loss_from_embeddings(embs, teacher)
    mse, ce = _bert_reference(embs, teacher.tolist())
    assert float(out["margin_mse"]) == pytest.approx(mse, rel=1e-5)
    assert float(out["contrastive"]) == pytest.approx(ce, rel=1e-5)


def test_bert_contrastive_ignores_hard_negatives(tiny_model_raw):
    """Changing the hard negatives changes Margin-MSE but not the CE term (paper: negatives = other positives)."""
    embs = _embeddings()
    other = embs[:2] + [e * 7 + 1 for e in embs[2:]]
    loss = BertRecipeLoss(tiny_model_raw)
    teacher = torch.zeros(4, 4)
    a, b = loss.compute_loss_from_embeddings(embs, teacher), loss.compute_loss_from_embeddings(other, teacher)
    torch.testing.assert_close(a["contrastive"], b["contrastive"])
    assert not torch.allclose(a["margin_mse"], b["margin_mse"])


@pytest.mark.parametrize("tau", [0.02, 0.05])
def test_ettin_recipe_matches_brute_force_and_st_mnrl(tiny_model, tau):
    embs = _embeddings(m=6)
    ours = EttinRecipeLoss(tiny_model, temperature=tau).compute_loss_from_embeddings(embs, None)
    assert set(ours) == {"contrastive"}
    assert float(ours["contrastive"]) == pytest.approx(_ettin_reference(embs, tau), rel=1e-4)
    mnrl = MultipleNegativesRankingLoss(tiny_model, scale=1 / tau, similarity_fct=cos_sim)
    expected = mnrl.compute_loss_from_embeddings(embs, None)
    torch.testing.assert_close(ours["contrastive"], expected, rtol=1e-5, atol=1e-6)


def test_margins_and_raw_scores_agree(tiny_model_raw):
    embs = _embeddings(k=2)
    raw = torch.tensor([[5.0, 1.0, 2.0], [3.0, 3.5, 0.0], [1.0, 0.0, 0.0], [2.0, 2.0, 2.0]])
    margins = raw[:, :1] - raw[:, 1:]
    loss = BertRecipeLoss(tiny_model_raw)
    a = loss.compute_loss_from_embeddings(embs, raw)["margin_mse"]
    b = loss.compute_loss_from_embeddings(embs, margins)["margin_mse"]
    torch.testing.assert_close(a, b)
    one = BertRecipeLoss(tiny_model_raw).compute_loss_from_embeddings(embs[:3], margins[:, 0])["margin_mse"]
    assert torch.isfinite(one)


def test_label_errors(tiny_model_raw):
    loss = BertRecipeLoss(tiny_model_raw)
    embs = _embeddings(k=2)
    with pytest.raises(ValueError, match=r"\[4, 3\] raw teacher scores or \[4, 2\] margins"):
        loss.compute_loss_from_embeddings(embs, torch.zeros(4, 5))
    with pytest.raises(ValueError, match="needs teacher scores"):
        loss.compute_loss_from_embeddings(embs, None)
    with pytest.raises(ValueError, match="hard-negative"):
        loss.compute_loss_from_embeddings(embs[:2], torch.zeros(4, 1))


def test_config_errors(tiny_model_raw):
    with pytest.raises(ValueError, match="positives, all"):
        MarginContrastiveLoss(tiny_model_raw, in_batch_negatives="hard")
    with pytest.raises(ValueError, match="both 0"):
        MarginContrastiveLoss(tiny_model_raw, margin_mse_weight=0, contrastive_weight=0)
    with pytest.raises(ValueError, match="Valid names"):
        MarginContrastiveLoss(tiny_model_raw, similarity="euclid")
    with pytest.raises(ValueError, match="temperature"):
        EttinRecipeLoss(tiny_model_raw, temperature=0)


@settings(max_examples=25, deadline=None)
@given(scale=st.floats(0.5, 5.0), shift=st.floats(-3, 3))
def test_margin_mse_zero_when_student_matches_teacher(scale, shift):
    """Property: a teacher equal to the student's own scores (any constant shift) gives zero Margin-MSE."""
    loss = MarginContrastiveLoss(torch.nn.Identity(), contrastive_weight=0.0)
    embs = [e * scale for e in _embeddings(k=3)]
    q = embs[0]
    teacher = torch.stack([(q * e).sum(-1) for e in embs[1:]], dim=1) + shift
    out = loss.compute_loss_from_embeddings(embs, teacher)
    assert float(out["margin_mse"]) == pytest.approx(0.0, abs=1e-6 * (1 + scale**4))


def test_qnorm_similarity_used_for_both_terms(tiny_model_raw):
    from st_magnitude.similarity import get_similarity

    embs = _embeddings()
    loss = MarginContrastiveLoss(tiny_model_raw, similarity="qnorm", contrastive_weight=1.0)
    teacher = torch.zeros(4, 4)
    out = loss.compute_loss_from_embeddings(embs, teacher)
    sim = get_similarity("qnorm")
    logits = sim(embs[0], embs[1])
    torch.testing.assert_close(out["contrastive"], torch.nn.functional.cross_entropy(logits, torch.arange(4)))


def test_forward_backprops_and_sets_roles(tiny_model_raw, sentences):
    loss = BertRecipeLoss(tiny_model_raw)
    feats = [tiny_model_raw.preprocess(sentences[i : i + 2]) for i in (0, 2, 4)]
    out = loss(feats, torch.tensor([[2.0, 1.0], [1.0, 0.0]]))
    total = sum(out.values())
    total.backward()
    assert [f["task"] for f in feats] == ["query", "document", "document"]
    grads = [p.grad for p in tiny_model_raw.parameters() if p.grad is not None]
    assert grads and any(float(g.abs().sum()) > 0 for g in grads)
    assert loss.get_config_dict()["in_batch_negatives"] == "positives"
    assert "killingback2026scaling" in loss.citation


def test_teacher_scores_from_callable_crossencoder_and_biencoder(tiny_model):
    queries = ["protein cell", "coffee sleep"]
    cands = [["protein gene", "tea"], ["sleep coffee", "fish"]]

    def overlap(qs, ps):
        return [len(set(q.split()) & set(p.split())) for q, p in zip(qs, ps)]

    torch.testing.assert_close(teacher_scores(overlap, queries, cands), torch.tensor([[1.0, 0.0], [2.0, 0.0]]))

    class FakeCrossEncoder:
        def predict(self, pairs, batch_size=32, convert_to_numpy=True):
            return np.array([float(len(q) - len(p)) for q, p in pairs])

    ce = teacher_scores(FakeCrossEncoder(), queries, cands)
    torch.testing.assert_close(ce[0], torch.tensor([len("protein cell") - len("protein gene"), 12.0 - 3.0]))
    bi = teacher_scores(tiny_model, queries, cands)
    eq = tiny_model.encode_query(queries, convert_to_tensor=True)
    ed = tiny_model.encode_document(cands[0], convert_to_tensor=True)
    torch.testing.assert_close(bi[0], tiny_model.similarity(eq[:1], ed)[0], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="same, non-zero number"):
        teacher_scores(overlap, queries, [["a"], ["b", "c"]])
    with pytest.raises(ValueError, match="callable"):
        teacher_scores(42, queries, cands)


def test_trainer_logs_both_terms(tiny_model_raw, tmp_path):
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    data = Dataset.from_dict(
        {
            "anchor": ["protein cell", "coffee sleep", "diet heart", "fish brain"],
            "positive": ["protein gene cell", "sleep coffee tea", "heart risk diet", "brain memory fish"],
            "negative": ["tea", "fish", "egg", "milk"],
            "label": [[3.0, 0.5], [2.0, 0.0], [2.5, 1.0], [1.0, 0.2]],
        }
    )
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=2, logging_steps=1, report_to=[],
        save_strategy="no", use_cpu=True,
    )  # fmt: skip
    trainer = SentenceTransformerTrainer(
        model=tiny_model_raw, args=args, train_dataset=data, loss=BertRecipeLoss(tiny_model_raw)
    )
    trainer.train()
    keys = {k for entry in trainer.state.log_history for k in entry}
    assert {"margin_mse", "contrastive"} <= keys


def test_magnitude_matryoshka_slices_without_normalising(tiny_model_raw):
    from st_magnitude.losses.magnitude_matryoshka import MagnitudeMatryoshkaLoss

    embs = [e * 3 for e in _embeddings(m=8)]
    teacher = torch.randn(4, 4, generator=torch.Generator().manual_seed(2))
    inner = BertRecipeLoss(tiny_model_raw)
    mat = MagnitudeMatryoshkaLoss(tiny_model_raw, inner, [8, 4, 2], [1.0, 0.5, 0.25])
    out = mat.compute_loss_from_embeddings(embs, teacher)
    for dim, w in ((8, 1.0), (4, 0.5), (2, 0.25)):
        mse, ce = _bert_reference([e[:, :dim] for e in embs], teacher.tolist())  # plain slices, norms kept
        assert float(out[f"margin_mse_{dim}"]) == pytest.approx(w * mse, rel=1e-5)
        assert float(out[f"contrastive_{dim}"]) == pytest.approx(w * ce, rel=1e-5)
    # ST's MatryoshkaLoss would feed unit vectors to the inner loss: a different number
    st_value = inner.compute_loss_from_embeddings([torch.nn.functional.normalize(e[:, :4], dim=-1) for e in embs],
                                                  teacher)["contrastive"]  # fmt: skip
    assert not torch.allclose(st_value, out["contrastive_4"] / 0.5)
    with pytest.raises(ValueError, match="exceed the embedding dimension"):
        MagnitudeMatryoshkaLoss(tiny_model_raw, inner, [16]).compute_loss_from_embeddings(embs, teacher)
    with pytest.raises(ValueError, match="compute_loss_from_embeddings"):
        MagnitudeMatryoshkaLoss(tiny_model_raw, torch.nn.Identity(), [4])


def test_roles_filled_when_router_preprocess_left_task_none(tiny_model_raw, sentences):
    # a Router model's preprocess() stores "task": None when no router_mapping is given; the roles must still be set
    from st_magnitude.losses.magnitude_matryoshka import MagnitudeMatryoshkaLoss

    teacher = torch.tensor([[2.0, 1.0], [1.0, 0.0]])
    for loss in (
        BertRecipeLoss(tiny_model_raw),
        MagnitudeMatryoshkaLoss(tiny_model_raw, BertRecipeLoss(tiny_model_raw), [8]),
    ):
        feats = [{**tiny_model_raw.preprocess(sentences[i : i + 2]), "task": None} for i in (0, 2, 4)]
        loss(feats, teacher)
        assert [f["task"] for f in feats] == ["query", "document", "document"]
