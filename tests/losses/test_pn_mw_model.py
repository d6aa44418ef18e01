"""PartialNormInfoNCE / MWLoss on real (tiny) SentenceTransformers: MNRL equality, cached == plain, roles on
converted models, bad inputs, warnings, autocast, Trainer / fit / model card."""

from __future__ import annotations

import logging
import math
import warnings

import pytest
import torch
from conftest import TRAIN_SENTENCES
from sentence_transformers.sentence_transformer.losses import (
    CachedMultipleNegativesRankingLoss,
    MultipleNegativesRankingLoss,
)

from st_magnitude import apply_similarity
from st_magnitude.losses import CachedMWLoss, CachedPartialNormInfoNCELoss, MWLoss, PartialNormInfoNCELoss
from st_magnitude.losses._common import LossSimilarityWarning

SENTS = TRAIN_SENTENCES[:6]


def batch(model, n_cols: int = 3, size: int = 4) -> list[dict]:
    """Column c holds SENTS rotated by c: distinct texts per column, positives differ from each other.

    A model with a ``Router`` (qnorm/dnorm, no default route) is tokenized per role, as the Trainer's collator does
    with ``router_mapping``: column 0 as queries, the others as documents.
    """
    from sentence_transformers.base.modules import Router

    cols = []
    for c in range(n_cols):
        texts = [SENTS[(i + c) % len(SENTS)] + " " + ("study " * c) for i in range(size)]
        role = {"task": "query" if c == 0 else "document"} if isinstance(model[0], Router) else {}
        cols.append(model.preprocess(texts, **role))
    return cols


def loss_and_grads(loss, model, features) -> tuple[float, dict[str, torch.Tensor]]:
    model.zero_grad()
    for p in loss.parameters():
        p.grad = None
    value = loss(features, None)
    value.backward()
    value = value.detach()
    grads = {n: p.grad.detach().clone() for n, p in loss.named_parameters() if p.grad is not None}
    return float(value), grads


def assert_same(a, b, atol=1e-5):
    (va, ga), (vb, gb) = a, b
    assert va == pytest.approx(vb, rel=1e-5, abs=atol)
    assert set(ga) == set(gb) and ga
    for name in ga:
        torch.testing.assert_close(ga[name], gb[name], rtol=1e-4, atol=atol, msg=name)


# ---------------------------------------------------------------------------------------------------------------
# equalities
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n_cols", [2, 4])
def test_cosine_equals_mnrl(tiny_model_raw, n_cols):
    model = tiny_model_raw.eval()
    ours = loss_and_grads(PartialNormInfoNCELoss(model, "cosine", scale=20.0), model, batch(model, n_cols))
    ref = loss_and_grads(MultipleNegativesRankingLoss(model, scale=20.0), model, batch(model, n_cols))
    assert abs(ours[0] - ref[0]) < 1e-6
    for name in ref[1]:
        torch.testing.assert_close(ours[1][name], ref[1][name], rtol=1e-5, atol=1e-6)


def test_cached_cosine_equals_cached_mnrl(tiny_model_raw):
    model = tiny_model_raw.eval()
    ours = loss_and_grads(CachedPartialNormInfoNCELoss(model, "cosine", mini_batch_size=3), model, batch(model, 3))
    ref = loss_and_grads(CachedMultipleNegativesRankingLoss(model, mini_batch_size=3), model, batch(model, 3))
    assert_same(ours, ref, atol=1e-6)


@pytest.mark.parametrize("similarity", ["qnorm", "dnorm", "dot"])
def test_cached_infonce_equals_plain(tiny_model_raw, similarity):
    model = tiny_model_raw.double().eval()  # float64: GradCache re-pads mini-batches, which only reorders fp sums
    plain = loss_and_grads(PartialNormInfoNCELoss(model, similarity), model, batch(model, 3))
    cached = loss_and_grads(CachedPartialNormInfoNCELoss(model, similarity, mini_batch_size=3), model, batch(model, 3))
    assert_same(plain, cached)


@pytest.mark.parametrize("similarity,reduction", [("cosine", "paper"), ("qnorm", "mean"), ("dnorm", "paper")])
def test_cached_mw_equals_plain(tiny_model_raw, similarity, reduction):
    model = tiny_model_raw.double().eval()
    kw = {"temperature": 0.05, "reduction": reduction}
    plain = loss_and_grads(MWLoss(model, similarity, **kw), model, batch(model, 3))
    cached = loss_and_grads(
        CachedMWLoss(model, similarity, mini_batch_size=3, chunk_size=17, **kw), model, batch(model, 3)
    )
    assert_same(plain, cached, atol=1e-5 * max(1.0, plain[0]))


@pytest.mark.parametrize("variant", ["qnorm", "dnorm", "learnable"])
@pytest.mark.parametrize("loss_cls", [PartialNormInfoNCELoss, MWLoss, CachedPartialNormInfoNCELoss, CachedMWLoss])
def test_converted_model_matches_swapped_similarity(tiny_bert_dir, variant, loss_cls):
    """A converted model (roles set by the loss, no router_mapping) trains the same loss as the plain model with the
    similarity applied to its raw outputs; gradients on the shared backbone agree."""
    from conftest import build_tiny_st

    extra = {"mini_batch_size": 2} if loss_cls in (CachedPartialNormInfoNCELoss, CachedMWLoss) else {}
    if loss_cls in (MWLoss, CachedMWLoss):
        extra["temperature"] = 0.1
    raw = build_tiny_st(tiny_bert_dir, normalize=False).double().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LossSimilarityWarning)  # plain learnable: γ̂ lives in the loss
        plain_loss = loss_cls(raw, variant, **extra)
    converted = apply_similarity(build_tiny_st(tiny_bert_dir, normalize=False), variant).double().eval()
    conv_loss = loss_cls(converted, None, **extra)
    assert conv_loss.carried is not None and plain_loss.carried is None
    v_plain, g_plain = loss_and_grads(plain_loss, raw, batch(raw, 3))
    v_conv, g_conv = loss_and_grads(conv_loss, converted, batch(converted, 3))
    assert v_plain == pytest.approx(v_conv, rel=1e-5)
    word = "embeddings.word_embeddings.weight"
    key_plain = next(k for k in g_plain if k.endswith(word))
    key_conv = next(k for k in g_conv if k.endswith(word))
    torch.testing.assert_close(g_plain[key_plain], g_conv[key_conv], rtol=1e-4, atol=1e-6)
    if variant == "learnable":  # γ̂ gets the same gradient whether it lives in the loss or in the model
        gp = [g for k, g in g_plain.items() if "gamma_query_logit" in k]
        gc = [g for k, g in g_conv.items() if "gamma_query_logit" in k]
        assert gp and gc and abs(float(gc[0])) > 0
        torch.testing.assert_close(gp[0].double(), gc[0].double(), rtol=1e-4, atol=1e-7)


def test_converted_model_keeps_router_mapping_roles(tiny_bert_dir):
    """A role already set (router_mapping) is kept: swapping the roles changes an asymmetric loss."""
    from conftest import build_tiny_st

    model = apply_similarity(build_tiny_st(tiny_bert_dir, normalize=False), "qnorm").eval()
    loss = PartialNormInfoNCELoss(model, None)
    default_feats = batch(model, 2)
    default = float(loss(default_feats, None).detach())
    assert [f["task"] for f in default_feats] == ["query", "document"]
    swapped = batch(model, 2)
    swapped[0]["task"], swapped[1]["task"] = "document", "query"
    assert float(loss(swapped, None).detach()) != pytest.approx(default, rel=1e-6)


# ---------------------------------------------------------------------------------------------------------------
# bad inputs and warnings
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("loss_cls", [PartialNormInfoNCELoss, MWLoss, CachedPartialNormInfoNCELoss, CachedMWLoss])
def test_batch_of_one_without_negatives_raises(tiny_model_raw, loss_cls):
    loss = loss_cls(tiny_model_raw, "dot")
    with pytest.raises(ValueError, match="no negatives"):
        loss(batch(tiny_model_raw, n_cols=2, size=1), None)
    value = loss(batch(tiny_model_raw, n_cols=3, size=1), None)  # one hard negative is enough
    assert math.isfinite(float(value))


@pytest.mark.parametrize("loss_cls", [PartialNormInfoNCELoss, MWLoss])
def test_single_column_raises(tiny_model_raw, loss_cls):
    with pytest.raises(ValueError, match="at least 2 input columns"):
        loss_cls(tiny_model_raw, "dot")(batch(tiny_model_raw, n_cols=1), None)


def test_duplicate_positive_is_a_negative_and_warns(tiny_model_raw, caplog):
    """Documented behaviour: a duplicated positive stays a negative of the other query (like MNRL) + a warning."""
    model = tiny_model_raw.eval()
    texts_q = SENTS[:4]
    texts_p = [SENTS[4], SENTS[4], SENTS[5], SENTS[0]]  # positives 0 and 1 identical
    feats = lambda: [model.preprocess(texts_q), model.preprocess(texts_p)]  # noqa: E731
    with caplog.at_level(logging.WARNING, logger="st_magnitude.losses._common"):
        ours = float(PartialNormInfoNCELoss(model, "cosine")(feats(), None))
    assert "NO_DUPLICATES" in caplog.text
    assert ours == pytest.approx(float(MultipleNegativesRankingLoss(model)(feats(), None)), abs=1e-6)
    # the duplicated pair: each query's positive also sits in the denominator as a 'negative' → loss ≥ log 2
    with torch.no_grad():
        q = model.encode(texts_q, convert_to_tensor=True)
        p = model.encode(texts_p, convert_to_tensor=True)
    logits = 20.0 * torch.nn.functional.normalize(q, dim=-1) @ torch.nn.functional.normalize(p, dim=-1).T
    row0 = float(torch.logsumexp(logits[0], 0) - logits[0, 0])
    assert row0 >= math.log(2) - 1e-6
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="st_magnitude.losses._common"):
        mw = float(MWLoss(model)(feats(), None))
    assert math.isfinite(mw) and "NO_DUPLICATES" in caplog.text


@pytest.mark.parametrize("similarity", ["qnorm", "dnorm", "dot", "learnable"])
def test_normalize_model_with_magnitude_similarity_warns(tiny_model, similarity):
    with pytest.warns(LossSimilarityWarning, match="apply_similarity"):
        PartialNormInfoNCELoss(tiny_model, similarity)


def test_no_warning_for_cosine_or_converted(tiny_model, tiny_bert_dir):
    from conftest import build_tiny_st

    with warnings.catch_warnings():
        warnings.simplefilter("error", LossSimilarityWarning)
        PartialNormInfoNCELoss(tiny_model, "cosine")
        MWLoss(tiny_model)
        converted = apply_similarity(build_tiny_st(tiny_bert_dir, normalize=False), "learnable")
        PartialNormInfoNCELoss(converted, "learnable")
        CachedMWLoss(converted, None)


def test_similarity_none_on_a_normalize_model_serving_dot_is_its_cosine_without_warning(tiny_model):
    """``apply_similarity(model, "cosine")`` leaves a model that ends in Normalize and serves ``dot``; a loss asked for
    "what the model carries" (similarity=None) trains its cosine, so the "dot keeps magnitude" warning is wrong there
    (it stays for an explicit ``similarity="dot"``, tested above). The loss equals the cosine loss and its config names
    "cosine", the similarity that trains."""
    tiny_model.similarity_fn_name = "dot"
    with warnings.catch_warnings():
        warnings.simplefilter("error", LossSimilarityWarning)
        from_model = PartialNormInfoNCELoss(tiny_model, None)
        mw = MWLoss(tiny_model, None)
    assert from_model.get_config_dict()["similarity"] == "cosine"
    assert mw.get_config_dict()["similarity"] == "cosine"
    b = batch(tiny_model, 3)
    with torch.no_grad():
        cosine = float(PartialNormInfoNCELoss(tiny_model, "cosine")(b, None))
        assert float(from_model(b, None)) == pytest.approx(cosine)


def test_plain_learnable_warns_not_saved(tiny_model_raw):
    with pytest.warns(LossSimilarityWarning, match="never saves"):
        loss = PartialNormInfoNCELoss(tiny_model_raw, "learnable")
    assert any("gamma_query_logit" in n for n, _ in loss.named_parameters())


def test_converted_model_rejects_other_similarity(tiny_bert_dir):
    from conftest import build_tiny_st

    model = apply_similarity(build_tiny_st(tiny_bert_dir, normalize=False), "qnorm")
    with pytest.raises(ValueError, match=r"carries the 'qnorm'.*'dnorm'"):
        PartialNormInfoNCELoss(model, "dnorm")
    with pytest.raises(ValueError, match="carries the 'qnorm'"):
        MWLoss(model, "learnable")
    assert PartialNormInfoNCELoss(model, "qnorm").similarity_name == "qnorm"
    assert MWLoss(model, None).get_config_dict()["carried_by_model"] is True


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"temperature": 0.0}, "temperature"),
        ({"reduction": "sum"}, r"\['paper', 'mean'\]"),
        ({"chunk_size": 0}, "chunk_size"),
        ({"similarity": "euclid"}, "Valid names"),
    ],
)
def test_mw_bad_arguments(tiny_model, kwargs, match):
    with pytest.raises(ValueError, match=match):
        MWLoss(tiny_model, **kwargs)


def test_infonce_bad_arguments(tiny_model):
    with pytest.raises(ValueError, match="scale"):
        PartialNormInfoNCELoss(tiny_model, "cosine", scale=0)
    with pytest.raises(ValueError, match="mini_batch_size"):
        CachedPartialNormInfoNCELoss(tiny_model, "cosine", mini_batch_size=0)


# ---------------------------------------------------------------------------------------------------------------
# mixed precision
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("loss_name", ["mw", "mw_grid", "infonce"])
def test_half_precision_embeddings_finite_at_tau_001(tiny_model_raw, dtype, loss_name):
    """fp16/bf16 embeddings (as autocast produces) with τ = 0.01: loss and gradients finite; on the grid also
    equal to the pairwise stage on the same half-precision embeddings."""
    g = torch.Generator().manual_seed(0)
    embs = [(torch.randn(16, 32, generator=g) * 3).to(dtype).requires_grad_() for _ in range(3)]
    if loss_name == "mw_grid":
        loss = MWLoss(tiny_model_raw, "qnorm", temperature=0.01, pair_stage="grid")
        twins = [e.detach().clone().requires_grad_() for e in embs]
        want = MWLoss(tiny_model_raw, "qnorm", temperature=0.01, pair_stage="pairwise").compute_loss_from_embeddings(
            twins
        )
        want.backward()
        got = loss.compute_loss_from_embeddings(embs)
        got.backward()
        assert float(got) == pytest.approx(float(want), rel=1e-5)
        for e, t in zip(embs, twins):
            assert (e.grad.float() - t.grad.float()).abs().max() <= 1e-2 * t.grad.float().abs().max()  # half grads
        return
    if loss_name == "mw":
        loss = MWLoss(tiny_model_raw, "qnorm", temperature=0.01)
    else:
        loss = PartialNormInfoNCELoss(tiny_model_raw, "qnorm", scale=100.0)
    value = loss.compute_loss_from_embeddings(embs)
    value.backward()
    assert torch.isfinite(value)
    for e in embs:
        assert e.grad is not None and torch.isfinite(e.grad.float()).all() and e.grad.abs().sum() > 0


@pytest.mark.parametrize("pair_stage", ["pairwise", "grid"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_through_model_finite(tiny_model_raw, dtype, pair_stage):
    model = tiny_model_raw
    loss = MWLoss(model, "dnorm", temperature=0.01, pair_stage=pair_stage)
    try:
        with torch.autocast("cpu", dtype=dtype):
            value = loss(batch(model, 3), None)
    except RuntimeError as err:  # an op without a CPU half kernel in this torch build
        pytest.skip(f"CPU autocast {dtype} unsupported here: {err}")
    value.backward()
    assert torch.isfinite(value)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)


# ---------------------------------------------------------------------------------------------------------------
# training integration
# ---------------------------------------------------------------------------------------------------------------
def _dataset(n_cols: int = 2, n: int = 8):
    from datasets import Dataset

    data = {"anchor": [SENTS[i % 6] + f" {i}" for i in range(n)], "positive": [SENTS[(i + 1) % 6] for i in range(n)]}
    if n_cols == 3:
        data["negative"] = [SENTS[(i + 3) % 6] + " trial" for i in range(n)]
    return Dataset.from_dict(data)


def test_trainer_moves_learnable_gamma_and_logs_it(tiny_bert_dir, tmp_path):
    from conftest import build_tiny_st
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    from st_magnitude.callbacks import GammaLoggingCallback

    model = apply_similarity(build_tiny_st(tiny_bert_dir, normalize=False), "learnable")
    before = [float(p) for n, p in model.named_parameters() if "gamma" in n]
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=2,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        learning_rate_mapping={r".*gamma_.*_logit": 5e-2},
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
    )
    loss = CachedPartialNormInfoNCELoss(model, None, mini_batch_size=2)
    trainer = SentenceTransformerTrainer(
        model=model, args=args, train_dataset=_dataset(), loss=loss, callbacks=[GammaLoggingCallback()]
    )
    trainer.train()
    after = [float(p) for n, p in model.named_parameters() if "gamma" in n]
    assert len(before) == 2 and all(abs(a - b) > 1e-4 for a, b in zip(after, before))
    logged = [h for h in trainer.state.log_history if "gamma_query" in h]
    assert logged and 0.0 < logged[-1]["gamma_query"] < 1.0
    # model card: loss name, config and citation
    model.save(str(tmp_path / "saved"))
    card = (tmp_path / "saved" / "README.md").read_text()
    assert "CachedPartialNormInfoNCELoss" in card and "feng2025beyondunithypersphere" in card
    assert '"similarity": "learnable"' in card


def test_trainer_mw_with_hard_negative_and_model_card(tiny_model, tmp_path):
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    model = tiny_model
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=4, report_to="none", use_cpu=True
    )
    start = model[0].auto_model.embeddings.word_embeddings.weight.detach().clone()
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=_dataset(3), loss=MWLoss(model))
    trainer.train()
    assert not torch.equal(start, model[0].auto_model.embeddings.word_embeddings.weight)
    model.save(str(tmp_path / "saved"))
    card = (tmp_path / "saved" / "README.md").read_text()
    assert "MWLoss" in card and "sheikholeslami2025optimizingwhatmatters" in card and '"reduction": "paper"' in card


@pytest.mark.parametrize("loss_cls", [MWLoss, PartialNormInfoNCELoss])
def test_legacy_fit(tiny_bert_dir, tmp_path, loss_cls):
    """model.fit has no router_mapping, so ST refuses Router (qnorm/dnorm corner) models there; a learnable
    (RoleNormalize) model works because the loss sets the roles itself."""
    from conftest import build_tiny_st
    from sentence_transformers.sentence_transformer.readers import InputExample
    from torch.utils.data import DataLoader

    model = apply_similarity(build_tiny_st(tiny_bert_dir, normalize=False), "learnable")
    examples = [InputExample(texts=[SENTS[i], SENTS[(i + 1) % 6]]) for i in range(6)]
    loader = DataLoader(examples, shuffle=False, batch_size=3)
    start = model[0].auto_model.embeddings.word_embeddings.weight.detach().clone()
    model.fit(
        train_objectives=[(loader, loss_cls(model, None))],
        epochs=1,
        warmup_steps=0,
        show_progress_bar=False,
        output_path=str(tmp_path / "fit"),
    )
    assert not torch.equal(start, model[0].auto_model.embeddings.word_embeddings.weight)
