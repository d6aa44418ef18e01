"""One checkpoint mechanism for the trainable state that lives in a loss (NAP head, Revela's LM, loss-held γ̂)."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch
from transformers import TrainerControl, TrainerState, TrainingArguments

from st_magnitude.callbacks import LossStateCallback, LossStatsCallback, load_loss_state
from st_magnitude.callbacks.loss_state import LOSS_STATE_FILENAME, loss_state_dict, save_loss_state
from st_magnitude.losses import CachedMWLoss, MWLoss
from st_magnitude.losses._common import LossSimilarityWarning
from st_magnitude.losses.l2dir import CachedL2DirLoss, L2DirLoss
from st_magnitude.losses.partial_norm_infonce import CachedPartialNormInfoNCELoss, PartialNormInfoNCELoss


def _learnable(model, cls=PartialNormInfoNCELoss, **kw):
    """A plain model trained with similarity="learnable": γ̂ lives in the loss (on purpose here)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LossSimilarityWarning)
        return cls(model, "learnable", **kw)


def _set_gammas(loss, value: float) -> None:
    with torch.no_grad():
        for p in loss.parameters():
            if p.requires_grad and p.numel() == 1:
                p.fill_(value)


def _state_at(step: int) -> TrainerState:
    state = TrainerState()
    state.global_step = step
    return state


def test_loss_held_gamma_round_trips_between_plain_and_cached(tiny_model_raw, tmp_path):
    # Given a plain loss whose γ̂ has moved away from its start
    plain = _learnable(tiny_model_raw)
    _set_gammas(plain, 1.25)
    state = loss_state_dict(plain)
    assert set(state) == {"similarity_fct.gamma_query_logit", "similarity_fct.gamma_document_logit"}
    # When it is saved and loaded into a fresh cached twin (and back)
    save_loss_state(plain, tmp_path)
    cached = _learnable(tiny_model_raw, CachedPartialNormInfoNCELoss, mini_batch_size=2)
    load_loss_state(cached, tmp_path)
    # Then the cached loss (which wraps a plain one) holds the same γ̂ under the same names
    assert set(loss_state_dict(cached)) == set(state)
    assert cached.similarity_fct.gamma_query == pytest.approx(plain.similarity_fct.gamma_query)
    save_loss_state(cached, tmp_path / "back")
    other = _learnable(tiny_model_raw)
    load_loss_state(other, tmp_path / "back")
    assert other.similarity_fct.gamma_document == pytest.approx(plain.similarity_fct.gamma_document)


def test_loading_state_into_a_loss_built_differently_raises(tiny_model, tmp_path):
    save_loss_state(L2DirLoss(tiny_model), tmp_path)
    with pytest.raises(ValueError, match="does not fit L2DirLoss.*other shape"):
        load_loss_state(L2DirLoss(tiny_model, nap_hidden_features=4), tmp_path)
    with pytest.raises(ValueError, match="missing"):
        load_loss_state(_learnable(tiny_model, MWLoss), tmp_path)
    with pytest.raises(FileNotFoundError, match="no saved loss state"):
        load_loss_state(L2DirLoss(tiny_model), tmp_path / "nowhere")


def test_a_loss_without_state_saves_nothing_and_resumes_silently(tiny_model, tmp_path, caplog):
    loss = CachedMWLoss(tiny_model, "cosine", mini_batch_size=2)
    assert loss_state_dict(loss) == {} and save_loss_state(loss, tmp_path) is None
    assert not (tmp_path / LOSS_STATE_FILENAME).exists()
    callback = LossStateCallback(loss)
    args = TrainingArguments(output_dir=str(tmp_path), report_to=[])
    with caplog.at_level(logging.WARNING):
        callback.on_train_begin(args, _state_at(3), TrainerControl())
    assert caplog.records == []


def test_resume_without_saved_state_raises_or_warns(tiny_model, tmp_path, caplog):
    args = TrainingArguments(output_dir=str(tmp_path), report_to=[])
    loss = CachedL2DirLoss(tiny_model, mini_batch_size=2)
    with pytest.raises(FileNotFoundError, match="CachedL2DirLoss .*would restart"):
        LossStateCallback(loss).on_train_begin(args, _state_at(2), TrainerControl())
    with caplog.at_level(logging.WARNING):
        LossStateCallback(loss, on_missing="warn").on_train_begin(args, _state_at(2), TrainerControl())
    assert "load_loss_state(loss" in caplog.text
    with pytest.raises(ValueError, match=r"on_missing must be one of \['raise', 'warn'\]"):
        LossStateCallback(loss, on_missing="ignore")
    assert loss.callback_attached  # the L2Dir "nothing saves the head" warning is off once a callback holds it


@pytest.mark.parametrize("cached", [False, True], ids=["plain", "cached"])
def test_trainer_resume_restores_a_loss_held_gamma(tiny_bert_dir, tmp_path, cached):
    """The loss-held γ̂ had no checkpoint mechanism before LossStateCallback: a resumed run restarted it."""
    from conftest import TRAIN_SENTENCES, build_tiny_st, cpu_training_args, first_step_probe
    from datasets import Dataset
    from safetensors.torch import load_file
    from sentence_transformers import SentenceTransformerTrainer

    def run(seed: int, probe: bool = False, resume: str | None = None):
        torch.manual_seed(seed)
        model = build_tiny_st(tiny_bert_dir, normalize=False)
        kw = {"mini_batch_size": 2} if cached else {}
        loss = _learnable(model, CachedPartialNormInfoNCELoss if cached else PartialNormInfoNCELoss, **kw)
        _set_gammas(loss, float(seed))  # a different start per run
        callbacks = [LossStateCallback(loss)] + ([first_step_probe(lambda: loss_state_dict(loss))] if probe else [])
        args = cpu_training_args(
            tmp_path, max_steps=4, per_device_train_batch_size=4, learning_rate=0.1, save_steps=2, disable_tqdm=True
        )
        data = Dataset.from_dict(
            {"anchor": TRAIN_SENTENCES, "positive": [s.split(" ", 1)[1] for s in TRAIN_SENTENCES]}
        )
        trainer = SentenceTransformerTrainer(
            model=model, args=args, train_dataset=data, loss=loss, callbacks=callbacks
        )
        trainer.train(resume_from_checkpoint=resume)
        return loss, callbacks

    # Given a run that saves γ̂ with its checkpoints
    loss, _ = run(0)
    at_2 = load_file(str(tmp_path / "checkpoint-2" / LOSS_STATE_FILENAME))
    assert set(at_2) == set(loss_state_dict(loss))
    # When a fresh loss with another γ̂ resumes from checkpoint-2
    _, (_, probe) = run(5, probe=True, resume=str(tmp_path / "checkpoint-2"))
    # Then its first step starts from the saved γ̂
    assert probe.seen is not None
    for name, value in at_2.items():
        torch.testing.assert_close(probe.seen[name], value, rtol=0, atol=0, msg=name)


def test_loss_stats_callback_logs_with_the_loss_prefix(tiny_model):
    loss = L2DirLoss(tiny_model)
    loss._record_stats({"length_ratio_mean": 1.23456})
    state = TrainerState()
    state.global_step = 1
    state.log_history = [{"step": 1, "loss": 0.5}]
    logs = {"loss": 0.5}
    LossStatsCallback(loss).on_log(None, state, TrainerControl(), logs=logs)
    assert logs["l2dir_length_ratio_mean"] == 1.2346 and state.log_history[-1]["l2dir_length_ratio_mean"] == 1.2346
