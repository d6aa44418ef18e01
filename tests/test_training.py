"""One real optimisation step through SentenceTransformerTrainer and the legacy model.fit on converted models."""

from __future__ import annotations

import warnings

import pytest
import torch
from datasets import Dataset
from sentence_transformers import InputExample, SentenceTransformerTrainer, SentenceTransformerTrainingArguments
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
from torch.utils.data import DataLoader

from st_magnitude import MagnitudeCollapseWarning, apply_similarity, get_similarity, model_similarity

PAIRS = {
    "anchor": ["protein cancer", "coffee sleep", "diet heart", "fish brain", "sugar blood", "exercise weight"],
    "positive": [
        "the protein increase in cancer cell",
        "tea and coffee sleep study",
        "vitamin and diet effect on heart risk",
        "fish fat acid brain memory",
        "blood sugar level in patients",
        "exercise and weight loss trial",
    ],
}


def snapshot(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def moved(before: dict[str, torch.Tensor], model, pattern: str = "") -> bool:
    return any(not torch.equal(before[n], p.detach()) for n, p in model.named_parameters() if pattern in n)


def train_args(tmp_path, **kw) -> SentenceTransformerTrainingArguments:
    base = dict(
        output_dir=str(tmp_path / "out"),
        max_steps=2,
        per_device_train_batch_size=3,
        learning_rate=1e-3,
        warmup_steps=0,
        router_mapping={"anchor": "query", "positive": "document"},
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        logging_steps=1,
        seed=0,
    )
    base.update(kw)
    return SentenceTransformerTrainingArguments(**base)


@pytest.mark.parametrize("name", ["qnorm", "dnorm", "dot"])
def test_trainer_step_with_mnrl_on_converted_model(tiny_model, tmp_path, name):
    # Given a converted model and ST's own MNRL with our similarity
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MagnitudeCollapseWarning)
        apply_similarity(tiny_model, name)
    loss = MultipleNegativesRankingLoss(tiny_model, similarity_fct=get_similarity(name))
    before = snapshot(tiny_model)
    trainer = SentenceTransformerTrainer(
        model=tiny_model, args=train_args(tmp_path), train_dataset=Dataset.from_dict(PAIRS), loss=loss
    )
    # When training two steps
    out = trainer.train()
    # Then the loss is finite and the weights moved
    assert torch.isfinite(torch.tensor(out.training_loss))
    assert moved(before, tiny_model)


def test_trainer_step_learnable_moves_gamma_with_its_own_learning_rate(tiny_model, tmp_path):
    apply_similarity(tiny_model, "learnable", warn_on_strip=False)
    role = tiny_model[-1]
    g0 = (role.gamma_query, role.gamma_document)
    loss = MultipleNegativesRankingLoss(tiny_model, similarity_fct=get_similarity("dot"))
    args = train_args(tmp_path, learning_rate_mapping={r"gamma_(query|document)_logit": 0.05})
    trainer = SentenceTransformerTrainer(
        model=tiny_model, args=args, train_dataset=Dataset.from_dict(PAIRS), loss=loss
    )
    # the γ̂ parameters sit in their own param group with the mapped learning rate
    trainer.create_optimizer()
    lrs = {id(p): group["lr"] for group in trainer.optimizer.param_groups for p in group["params"]}  # type: ignore[union-attr]
    assert lrs[id(role.gamma_query_logit)] == pytest.approx(0.05)
    out = trainer.train()
    assert torch.isfinite(torch.tensor(out.training_loss))
    assert role.gamma_query != pytest.approx(g0[0], abs=1e-6)
    assert role.gamma_document != pytest.approx(g0[1], abs=1e-6)


def test_trainer_without_router_mapping_on_router_model_is_refused(tiny_model, tmp_path):
    apply_similarity(tiny_model, "qnorm", warn_on_strip=False)
    loss = MultipleNegativesRankingLoss(tiny_model, similarity_fct=get_similarity("qnorm"))
    with pytest.raises(ValueError, match="router_mapping"):
        SentenceTransformerTrainer(
            model=tiny_model,
            args=train_args(tmp_path, router_mapping={}),
            train_dataset=Dataset.from_dict(PAIRS),
            loss=loss,
        )


@pytest.mark.parametrize("name", ["qnorm", "dnorm", "learnable"])
def test_legacy_fit_step(tiny_model, tmp_path, name):
    # fit() cannot pass router_mapping, so qnorm/dnorm use the non-Router form and the loss's similarity applies the
    # variant to the raw embeddings (the model passes them through when no role is known in training)
    apply_similarity(tiny_model, name, warn_on_strip=False, portable=False)
    sim = get_similarity(name) if name != "learnable" else model_similarity(tiny_model)
    loss = MultipleNegativesRankingLoss(tiny_model, similarity_fct=sim)
    examples = [InputExample(texts=[a, p]) for a, p in zip(PAIRS["anchor"], PAIRS["positive"])]
    loader = DataLoader(examples, batch_size=3, shuffle=False)
    before = snapshot(tiny_model)
    tiny_model.fit(
        train_objectives=[(loader, loss)],
        epochs=1,
        warmup_steps=0,
        optimizer_params={"lr": 1e-3},
        show_progress_bar=False,
        output_path=None,
        checkpoint_path=None,
    )
    assert moved(before, tiny_model)
    if name == "learnable":
        assert moved(before, tiny_model, "gamma_")


def test_fit_trained_model_becomes_portable_again(tiny_model, tmp_path):
    from sentence_transformers.base.modules import Router

    apply_similarity(tiny_model, "dnorm", warn_on_strip=False, portable=False)
    q = tiny_model.encode_query(PAIRS["anchor"], convert_to_tensor=True)
    d = tiny_model.encode_document(PAIRS["positive"], convert_to_tensor=True)
    apply_similarity(tiny_model, "dnorm")
    assert isinstance(tiny_model[0], Router)
    torch.testing.assert_close(tiny_model.encode_query(PAIRS["anchor"], convert_to_tensor=True), q)
    torch.testing.assert_close(tiny_model.encode_document(PAIRS["positive"], convert_to_tensor=True), d)


def test_training_without_roles_passes_raw_embeddings(tiny_model):
    # a learnable model in training mode without any role leaves the embedding to the loss's similarity
    apply_similarity(tiny_model, "learnable", warn_on_strip=False)
    feats = {"sentence_embedding": torch.randn(3, 32) * 5}
    raw = feats["sentence_embedding"].clone()
    tiny_model.train()
    torch.testing.assert_close(tiny_model[-1](dict(feats))["sentence_embedding"], raw)
    tiny_model.eval()
    out = tiny_model[-1](dict(feats))["sentence_embedding"]  # inference default role: document
    torch.testing.assert_close(out, raw / raw.norm(dim=-1, keepdim=True) ** 0.5)
