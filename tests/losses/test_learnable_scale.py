"""The learnable softmax scale / temperature (``scale="learnable"``, ``temperature="learnable"``).

Checked against independent references: the InfoNCE log-scale gradient against its closed form, every loss's
gradient against a central finite difference of the *fixed*-scale loss (plain and cached), the Trainer's
gradient-accumulation step against the mean of the two micro-batch gradients computed by hand, a resumed run against
an uninterrupted one (bit for bit), the CLIP clamp, and the error for every value a user can pass wrongly.
(Two processes against one: ``dist_gather_check.py``; cached against plain under accumulation and fp16 loss
scaling: ``test_cached_outer_scale.py``.)
"""

from __future__ import annotations

import math

import pytest
import torch
from conftest import TRAIN_SENTENCES, build_tiny_st, cpu_training_args
from sentence_transformers.base.modules import Normalize
from torch import nn

from st_magnitude.callbacks import LossStateCallback, ScaleLoggingCallback
from st_magnitude.callbacks.scale import current_scale
from st_magnitude.losses import (
    CachedL2DirLoss,
    CachedMWLoss,
    CachedPartialNormInfoNCELoss,
    L2DirLoss,
    MWLoss,
    PartialNormInfoNCELoss,
)
from st_magnitude.losses._temperature import MAX_SCALE, MIN_SCALE, LearnableScale
from st_magnitude.modules.nap_head import NAPHead

B, H, N_IN, DIM = 6, 1, 5, 4


class LinearStep(nn.Module):
    """features["input_ids"] (float inputs) @ W → features["sentence_embedding"]."""

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight.clone())

    def forward(self, features: dict) -> dict:
        return {**features, "sentence_embedding": features["input_ids"] @ self.weight}


def _inputs():
    g = torch.Generator().manual_seed(0)
    inputs = [torch.randn(B, N_IN, generator=g, dtype=torch.float64) for _ in range(2 + H)]
    return inputs, torch.randn(N_IN, DIM, generator=g, dtype=torch.float64)


def _build(kind: str, value, weight):
    """The loss ``kind`` with its scale (InfoNCE) or temperature (MW, L2Dir) set to ``value``."""
    model = nn.Sequential(LinearStep(weight))
    if kind == "infonce":
        return PartialNormInfoNCELoss(model, "cosine", scale=value)
    if kind == "infonce_cached":
        return CachedPartialNormInfoNCELoss(model, "cosine", scale=value, mini_batch_size=4)
    if kind == "mw":
        return MWLoss(model, "cosine", temperature=value, chunk_size=7)
    if kind == "mw_cached":
        return CachedMWLoss(model, "cosine", temperature=value, reduction="mean", mini_batch_size=4)
    torch.manual_seed(5)  # the same NAP head for every build
    model = nn.Sequential(LinearStep(weight), Normalize())
    cls, kw = (CachedL2DirLoss, {"mini_batch_size": 4}) if kind == "l2dir_cached" else (L2DirLoss, {})
    loss = cls(model, temperature=value, tn_temperature=0.1, nap_head=NAPHead(DIM), **kw)
    loss.callback_attached = True
    return loss


def _value(loss, inputs) -> torch.Tensor:
    out = loss([{"input_ids": x} for x in inputs], None)
    return torch.stack(list(out.values())).sum() if isinstance(out, dict) else out


def _learnable_module(loss) -> LearnableScale:
    (module,) = [m for m in loss.modules() if isinstance(m, LearnableScale)]
    return module


KINDS = ["infonce", "infonce_cached", "mw", "mw_cached", "l2dir", "l2dir_cached"]


@pytest.mark.parametrize("kind", KINDS)
def test_log_scale_gradient_equals_finite_difference_of_the_fixed_loss(kind):
    inputs, weight = _inputs()
    is_temperature = not kind.startswith("infonce")
    scale = 7.3  # inside the clamp, away from every default
    loss = _build(kind, "learnable", weight).double()
    module = _learnable_module(loss)
    with torch.no_grad():
        module.log_scale.fill_(math.log(scale))

    def fixed(s: float) -> float:
        with torch.no_grad():
            return float(_value(_build(kind, 1 / s if is_temperature else s, weight).double(), inputs))

    # Given the learnable loss at scale s, its value equals the fixed loss at s
    value = _value(loss, inputs)
    value.backward()
    assert float(value.detach()) == pytest.approx(fixed(scale), rel=1e-12)
    # and d value / d log s equals the central difference of the fixed loss in log s
    h = 1e-5
    numeric = (fixed(scale * math.exp(h)) - fixed(scale * math.exp(-h))) / (2 * h)
    assert abs(numeric) > 1e-3, "a vanishing derivative would make the comparison vacuous"
    assert float(module.log_scale.grad) == pytest.approx(numeric, rel=1e-6)


def test_infonce_log_scale_gradient_closed_form():
    # dL/d log s = s · mean_i (Σ_j p_ij c_ij − c_i,i⁺), p = softmax(s·c) over each row (paper 000 eq. 2)
    inputs, weight = _inputs()
    loss = _build("infonce", "learnable", weight).double()
    _value(loss, inputs).backward()
    q = nn.functional.normalize(inputs[0] @ weight, dim=-1)
    d = nn.functional.normalize(torch.cat(inputs[1:]) @ weight, dim=-1)
    c = q @ d.T
    s = math.exp(float(_learnable_module(loss).log_scale.detach()))  # 20 up to the float32 start of log 20
    p = torch.softmax(s * c, dim=1)
    expected = s * float(((p * c).sum(1) - c.diagonal()).mean())
    assert float(_learnable_module(loss).log_scale.grad) == pytest.approx(expected, rel=1e-10)


def test_clamp_keeps_the_scale_at_most_100_and_the_gradient_flows_at_the_bound():
    module = LearnableScale(20.0).double()
    with torch.no_grad():
        module.log_scale.fill_(math.log(250.0))  # an optimizer step overshot
    value = module()
    assert float(value.detach()) == pytest.approx(MAX_SCALE, rel=1e-12) and module.value == pytest.approx(100.0)
    assert float(module.log_scale) == pytest.approx(math.log(100.0), rel=1e-15)  # clamped in place (CLIP)
    value.backward()
    assert float(module.log_scale.grad) == pytest.approx(100.0)  # d exp(l)/dl at the bound: not cut off
    with pytest.raises(ValueError, match=r"init_scale must lie in \[1, 100\]"):
        LearnableScale(150.0)


def test_clamp_keeps_the_scale_at_least_1_as_openclip_and_the_gradient_flows_at_the_bound():
    # OpenCLIP: logit_scale.clamp_(0, ln 100) after each step, so the scale never drops below exp(0) = 1
    module = LearnableScale(20.0).double()
    with torch.no_grad():
        module.log_scale.fill_(math.log(0.01))  # an optimizer step overshot downwards
    assert module.value == pytest.approx(MIN_SCALE)
    value = module()
    assert float(value.detach()) == pytest.approx(1.0, rel=1e-12)
    assert float(module.log_scale) == 0.0  # clamped in place, like OpenCLIP's clamp_
    value.backward()
    assert float(module.log_scale.grad) == pytest.approx(1.0)  # d exp(l)/dl at l = 0: not cut off
    with pytest.raises(ValueError, match=r"init_scale must lie in \[1, 100\]"):
        LearnableScale(0.5)


def test_defaults_and_config():
    inputs, weight = _inputs()
    pn = _build("infonce_cached", "learnable", weight)
    assert pn.get_config_dict()["scale"] == "learnable"
    assert pn.get_config_dict()["scale_init"] == 20.0 and pn.get_config_dict()["scale_learned"] == pytest.approx(20)
    assert pn.temperature == pytest.approx(0.05)
    mw = _build("mw", "learnable", weight)  # MW's default τ = 0.01 is the clamp: it starts at the bound
    config = mw.get_config_dict()
    assert (config["temperature"], config["temperature_init"]) == ("learnable", 0.01) and mw.scale == 100
    l2 = _build("l2dir_cached", "learnable", weight)
    assert l2.get_config_dict()["temperature_init"] == 0.02 and l2.scale == pytest.approx(50)
    assert current_scale(l2) == {"learned_scale": pytest.approx(50), "learned_temperature": pytest.approx(0.02)}
    assert _build("infonce", 20.0, weight).get_config_dict()["scale"] == 20.0
    with pytest.raises(ValueError, match="holds no learnable scale"):
        ScaleLoggingCallback(_build("mw", 0.05, weight))


@pytest.mark.parametrize(
    "bad", ["learnble", "Learnable", -1, 0, 0.0, math.inf, math.nan, True, None, [20], 1e308, 5e-324, 10**400]
)
@pytest.mark.parametrize("kind", ["infonce", "infonce_cached", "mw", "mw_cached", "l2dir", "l2dir_cached"])
def test_bad_values_name_the_allowed_ones(kind, bad):
    _, weight = _inputs()
    with pytest.raises(ValueError, match=r"(?=.*'learnable').*must be a finite number in 1e-06 ≤ \w+ ≤ 1e\+06"):
        _build(kind, bad, weight)


# --- under the Trainer ------------------------------------------------------------------------------------------


def _data():
    from datasets import Dataset

    return Dataset.from_dict({"anchor": TRAIN_SENTENCES, "positive": [s.split(" ", 1)[1] for s in TRAIN_SENTENCES]})


def _recording(cls):
    class Recording(cls):
        """Keeps a copy of every micro-batch the Trainer passes in."""

        def forward(self, sentence_features, labels=None):
            features = list(sentence_features)
            self.__dict__.setdefault("seen", []).append(
                [{k: v.clone() if torch.is_tensor(v) else v for k, v in f.items()} for f in features]
            )
            return super().forward(features, labels)

    return Recording


@pytest.mark.parametrize("kind", ["infonce", "infonce_cached", "mw_cached", "mw_grid", "mw_cached_grid"])
def test_trainer_gradient_accumulation_equals_the_mean_of_its_micro_batches(tiny_bert_dir, tmp_path, kind):
    from sentence_transformers import SentenceTransformerTrainer

    cls = {
        "infonce": PartialNormInfoNCELoss,
        "infonce_cached": CachedPartialNormInfoNCELoss,
        "mw_cached": CachedMWLoss,
        "mw_grid": MWLoss,
        "mw_cached_grid": CachedMWLoss,
    }
    kw = {"mini_batch_size": 3} if "cached" in kind else {}
    kw.update({"temperature": "learnable", "reduction": "mean"} if kind.startswith("mw") else {"scale": "learnable"})
    kw.update({"pair_stage": "grid"} if kind.endswith("grid") else {})

    def fresh():
        model = build_tiny_st(tiny_bert_dir, normalize=False, dropout=0.0).double()
        return model, _recording(cls[kind])(model, "cosine", **kw).double()

    # Given one SGD step of the Trainer over 2 accumulated micro-batches of 4
    model, loss = fresh()
    lr = 0.5
    args = cpu_training_args(
        tmp_path, max_steps=1, per_device_train_batch_size=4, gradient_accumulation_steps=2, optim="sgd",
        learning_rate=lr, lr_scheduler_type="constant", weight_decay=0.0, max_grad_norm=0.0, save_strategy="no",
        disable_tqdm=True,
    )  # fmt: skip
    SentenceTransformerTrainer(model=model, args=args, train_dataset=_data(), loss=loss).train()
    assert len(loss.seen) == 2
    # When the same step is computed by hand: the mean of the two micro-batch gradients, p − lr·ḡ
    ref_model, ref_loss = fresh()
    for batch in loss.seen:
        _value_of(ref_loss, batch).backward()
    expected = {n: p.detach() - lr * p.grad / 2 for n, p in ref_loss.named_parameters() if p.grad is not None}
    # Then every parameter, the log-scale included, is where the hand-computed step puts it
    trained = dict(loss.named_parameters())
    assert any(n.endswith("log_scale") for n in expected)
    for name, value in expected.items():
        torch.testing.assert_close(trained[name].detach(), value, rtol=0, atol=1e-10, msg=name)
    held = [n for n in expected if n.endswith("log_scale")][0]
    assert abs(float(trained[held]) - float(ref_loss.get_parameter(held))) > 1e-4  # it moved


def test_a_trainer_step_that_lowers_the_scale_stops_at_1(tiny_bert_dir, tmp_path):
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer

    # Given 4 rows whose labelled positive is never the best match: row i's positive is anchor i+1, so the candidate
    # of row i-1 *is* anchor i (cosine 1). A larger scale only sharpens the wrong ranking, so the gradient lowers it.
    anchors = TRAIN_SENTENCES[:4]
    data = Dataset.from_dict({"anchor": anchors, "positive": anchors[1:] + anchors[:1]})
    model = build_tiny_st(tiny_bert_dir, normalize=False, dropout=0.0)
    loss = PartialNormInfoNCELoss(model, "cosine", scale="learnable")
    probe = loss([model.preprocess(anchors), model.preprocess(data["positive"])], None)
    probe.backward()
    assert float(loss.scale.log_scale.grad) > 0  # the step goes down: the case the lower bound is for
    loss.zero_grad()
    model.zero_grad()
    # When one SGD step with a large learning rate on the log-scale is taken by the Trainer
    args = cpu_training_args(
        tmp_path, max_steps=1, per_device_train_batch_size=4, optim="sgd", learning_rate=0.0,
        learning_rate_mapping={r"log_scale$": 1e4}, lr_scheduler_type="constant", weight_decay=0.0,
        max_grad_norm=0.0, save_strategy="no", disable_tqdm=True,
    )  # fmt: skip
    SentenceTransformerTrainer(model=model, args=args, train_dataset=data, loss=loss).train()
    # Then the step overshot below ln 1 = 0, and the next read pulls it back to scale 1 (OpenCLIP's bound)
    assert float(loss.scale.log_scale) < 0
    assert loss.scale.value == pytest.approx(1.0)
    assert float(loss.scale()) == pytest.approx(1.0) and float(loss.scale.log_scale) == 0.0
    assert loss.get_config_dict()["scale_learned"] == 1.0


def _value_of(loss, batch):
    out = loss([dict(f) for f in batch], None)
    return torch.stack(list(out.values())).sum() if isinstance(out, dict) else out


def test_resume_is_bit_identical_and_the_scale_has_its_own_learning_rate(tiny_bert_dir, tmp_path):
    from sentence_transformers import SentenceTransformerTrainer

    def run(resume: str | None = None):
        model = build_tiny_st(tiny_bert_dir, normalize=False)
        loss = CachedPartialNormInfoNCELoss(model, "cosine", scale="learnable", mini_batch_size=2)
        args = cpu_training_args(
            tmp_path, max_steps=4, per_device_train_batch_size=4, learning_rate=1e-3, save_steps=2, logging_steps=1,
            learning_rate_mapping={r"log_scale$": 0.05}, lr_scheduler_type="constant", disable_tqdm=True,
        )  # fmt: skip
        callbacks = [LossStateCallback(loss), ScaleLoggingCallback(loss)]
        trainer = SentenceTransformerTrainer(
            model=model, args=args, train_dataset=_data(), loss=loss, callbacks=callbacks
        )
        trainer.train(resume_from_checkpoint=resume)
        return trainer, loss

    # Given an uninterrupted 4-step run
    trainer, loss = run()
    straight = {n: p.detach().clone() for n, p in loss.named_parameters()}
    (group,) = [g for g in trainer.optimizer.param_groups if any(p is loss.scale.log_scale for p in g["params"])]
    assert group["lr"] == 0.05 and len(group["params"]) == 1  # learning_rate_mapping reached it
    trajectory = [h["learned_scale"] for h in trainer.state.log_history if "learned_scale" in h]
    assert len(trajectory) >= 4 and trajectory[-1] != pytest.approx(20.0, abs=1e-3)
    assert trajectory[-1] == pytest.approx(loss.scale.value)
    # When a fresh run resumes from its step-2 checkpoint
    _, resumed = run(resume=str(tmp_path / "checkpoint-2"))
    # Then it ends bit-identical: model and learnable scale
    for name, value in resumed.named_parameters():
        torch.testing.assert_close(value.detach(), straight[name], rtol=0, atol=0, msg=name)
