"""L2Dir with the SentenceTransformerTrainer: logging, and the NAP head saved with checkpoints and restored on resume.

sentence-transformers saves only the model and restores only the model, so without
LossStateCallback a resumed run silently restarts the NAP head from random weights.
"""

from __future__ import annotations

import pytest
import torch
from conftest import first_step_probe

from st_magnitude.callbacks import LossStateCallback, LossStatsCallback
from st_magnitude.callbacks.loss_state import LOSS_STATE_FILENAME
from st_magnitude.losses.l2dir import CachedL2DirLoss, L2DirLoss, load_nap_head, save_nap_head
from st_magnitude.modules.nap_head import NAPHead


def _dataset(sentences):
    from datasets import Dataset

    anchors = sentences * 3
    positives = [s.split(" ", 1)[-1] for s in anchors]
    return Dataset.from_dict({"anchor": anchors[:16], "positive": positives[:16]})


def _args(out, max_steps):
    from conftest import cpu_training_args

    kw = {"per_device_train_batch_size": 4, "learning_rate": 1e-3, "logging_steps": 1}
    return cpu_training_args(out, max_steps=max_steps, save_strategy="steps", save_steps=2, **kw)


def _state(head: NAPHead) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in head.state_dict().items()}


def _saved_head(checkpoint) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    saved = load_file(str(checkpoint / LOSS_STATE_FILENAME))
    assert all(k.startswith("nap_head.") for k in saved)  # a cached loss saves under the plain loss's names
    return {k.removeprefix("nap_head."): v for k, v in saved.items()}


def _l2dir(model, cached: bool):
    kw = {"temperature": 0.05, "tn_temperature": 0.05}
    return CachedL2DirLoss(model, mini_batch_size=2, **kw) if cached else L2DirLoss(model, **kw)


@pytest.mark.parametrize("cached", [False, True], ids=["plain", "cached"])
def test_nap_head_is_saved_with_checkpoints_and_restored_on_resume(tiny_bert_dir, sentences, tmp_path, cached):
    from conftest import build_tiny_st
    from sentence_transformers import SentenceTransformerTrainer

    # Given a 4-step run that checkpoints every 2 steps
    torch.manual_seed(0)
    model = build_tiny_st(tiny_bert_dir)
    loss = _l2dir(model, cached)
    init = _state(loss.nap_head)
    trainer = SentenceTransformerTrainer(
        model=model,
        args=_args(tmp_path, 4),
        train_dataset=_dataset(sentences),
        loss=loss,
        callbacks=[LossStateCallback(loss), LossStatsCallback(loss)],
    )
    trainer.train()
    final = _state(loss.nap_head)
    # Then every checkpoint holds the head, and the head has been trained
    for step in (2, 4):
        assert (tmp_path / f"checkpoint-{step}" / LOSS_STATE_FILENAME).is_file()
    assert not torch.equal(init["projections.default.weight"], final["projections.default.weight"])
    at_step_2 = _saved_head(tmp_path / "checkpoint-2")
    at_step_4 = _saved_head(tmp_path / "checkpoint-4")
    assert all(torch.equal(at_step_4[k], final[k]) for k in final)
    # and both loss parts plus the positive-pair length ratio were logged
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert logs and all({"infonce", "infotn", "l2dir_length_ratio_mean"} <= set(h) for h in logs)
    assert all(h["l2dir_length_ratio_mean"] > 0 for h in logs)

    # When a fresh model and loss (another random head) resume from checkpoint-2
    torch.manual_seed(123)
    model2 = build_tiny_st(tiny_bert_dir)
    loss2 = _l2dir(model2, cached)
    assert not torch.equal(loss2.nap_head.projections["default"].weight, at_step_2["projections.default.weight"])
    probe = first_step_probe(loss2.nap_head.state_dict)
    trainer2 = SentenceTransformerTrainer(
        model=model2,
        args=_args(tmp_path, 4),
        train_dataset=_dataset(sentences),
        loss=loss2,
        callbacks=[LossStateCallback(loss2), probe],
    )
    trainer2.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    # Then the first resumed step starts from exactly the checkpointed head
    assert probe.seen is not None
    assert all(torch.equal(probe.seen[k], at_step_2[k]) for k in at_step_2)
    # and steps 3-4 continue the same trajectory as the uninterrupted run
    resumed = _state(loss2.nap_head)
    for key in final:
        torch.testing.assert_close(resumed[key], final[key], rtol=1e-4, atol=1e-5)


def test_save_and_load_nap_head_helpers(tiny_model, tmp_path):
    loss = L2DirLoss(tiny_model)
    folder = save_nap_head(loss, tmp_path / "head")
    other = L2DirLoss(tiny_model)
    load_nap_head(other, folder)
    assert all(
        torch.equal(a, b) for a, b in zip(loss.nap_head.state_dict().values(), other.nap_head.state_dict().values())
    )
    with pytest.raises(FileNotFoundError, match="no saved NAP head"):
        load_nap_head(other, tmp_path / "missing")
    with pytest.raises(ValueError, match="same head shape"):
        load_nap_head(L2DirLoss(tiny_model, nap_hidden_features=4), folder)
    with pytest.raises(ValueError, match="keeps no statistics"):
        LossStatsCallback(torch.nn.Linear(2, 2))
