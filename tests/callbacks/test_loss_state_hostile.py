"""A loss state read back from disk goes through the trust boundary: a NaN, an infinity or a broken file is refused
when it is read, naming the file and the tensor; nothing is copied into the loss then.

Before: ``load_loss_state`` copied a saved ``log_scale`` of ``-inf`` or NaN into the loss (a learnable scale of
``exp(-inf) = 0`` zeroes every logit: zero gradients from then on; NaN: NaN gradients), a truncated file surfaced as
safetensors' ``SafetensorError`` traceback, and names that do not fit were a ``ValueError`` without the file. The same
for Revela's LM weights (``load_lm_weights``).
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from helpers.mutate import mutate_bytes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file
from sentence_transformers.base.modules import Normalize
from torch import nn

from st_magnitude._trust import InputFileError
from st_magnitude._trust.tensors import load_tensors
from st_magnitude.callbacks import LossStateCallback, load_loss_state
from st_magnitude.callbacks.loss_state import LOSS_STATE_FILENAME, loss_state_dict, save_loss_state
from st_magnitude.losses import L2DirLoss, PartialNormInfoNCELoss
from st_magnitude.losses._loss_state import load_loss_state_dict
from st_magnitude.losses.revela_lm import load_lm_weights, save_lm_weights
from st_magnitude.modules.nap_head import NAPHead


class LinearStep(nn.Module):
    """features["input_ids"] (float inputs) @ W → features["sentence_embedding"]."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(5, 4, generator=torch.Generator().manual_seed(0)))

    def forward(self, features: dict) -> dict:
        return {**features, "sentence_embedding": features["input_ids"] @ self.weight}


def _l2dir() -> L2DirLoss:
    """A loss with a learnable temperature and a NAP head: three tensors of state."""
    torch.manual_seed(3)
    loss = L2DirLoss(nn.Sequential(LinearStep(), Normalize()), temperature="learnable", nap_head=NAPHead(4))
    loss.callback_attached = True
    return loss


def _infonce() -> PartialNormInfoNCELoss:
    return PartialNormInfoNCELoss(nn.Sequential(LinearStep()), "cosine", scale="learnable")


def _held(loss) -> dict[str, torch.Tensor]:
    return {name: tensor.clone() for name, tensor in loss_state_dict(loss).items()}


@pytest.mark.parametrize("bad", [-math.inf, math.inf, math.nan], ids=["-inf", "inf", "nan"])
def test_a_saved_log_scale_that_is_not_finite_is_refused_naming_file_and_key(tmp_path, bad):
    # Given a checkpointed learnable scale whose saved value is not finite
    saved = _infonce()
    path = save_loss_state(saved, tmp_path)
    save_file({"scale.log_scale": torch.tensor(bad)}, str(path))
    # When a fresh loss restores it
    loss = _infonce()
    before = _held(loss)
    with pytest.raises(
        InputFileError, match=r"loss_state\.safetensors: tensor 'scale\.log_scale' holds 1 (NaN|infinite)"
    ):
        load_loss_state(loss, tmp_path)
    # Then nothing was copied: the scale is where it started
    assert _held(loss) == before and loss.scale.value == pytest.approx(20.0)


def test_one_nan_in_a_nap_head_is_refused_naming_the_tensor(tmp_path):
    saved = _l2dir()
    path = save_loss_state(saved, tmp_path)
    state = loss_state_dict(saved)
    name = next(n for n in state if n.endswith("weight"))
    state[name][1, 2] = float("nan")
    save_file(state, str(path))
    with pytest.raises(InputFileError, match=rf"tensor '{name}' holds 1 NaN value\(s\) of 16"):
        load_loss_state(_l2dir(), tmp_path)


def test_the_in_memory_protocol_refuses_a_non_finite_state_too():
    loss = _infonce()
    with pytest.raises(ValueError, match=r"holds NaN or ±inf in 'scale\.log_scale'"):
        load_loss_state_dict(loss, {"scale.log_scale": torch.tensor(-math.inf)})
    assert loss.scale.value == pytest.approx(20.0)


def test_a_truncated_or_foreign_file_is_one_error_naming_it(tmp_path):
    path = save_loss_state(_l2dir(), tmp_path)
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(InputFileError, match=r"loss_state\.safetensors: is not a valid safetensors file"):
        load_loss_state(_l2dir(), tmp_path)
    path.write_bytes(b"PK\x03\x04 a zip, not a state")
    with pytest.raises(InputFileError, match="is not a valid safetensors file"):
        load_loss_state(_l2dir(), tmp_path)


def test_a_state_of_another_loss_names_the_file(tmp_path):
    save_loss_state(_infonce(), tmp_path)
    with pytest.raises(InputFileError, match=r"loss_state\.safetensors: the saved state does not fit L2DirLoss"):
        load_loss_state(_l2dir(), tmp_path)


def test_load_tensors_reads_a_valid_file_and_refuses_a_folder(tmp_path):
    save_file({"a": torch.arange(3.0), "i": torch.tensor([1, 2])}, str(tmp_path / "t.safetensors"))
    got = load_tensors(tmp_path / "t.safetensors")
    assert torch.equal(got["a"], torch.arange(3.0)) and torch.equal(got["i"], torch.tensor([1, 2]))
    with pytest.raises(InputFileError, match="is not a file"):
        load_tensors(tmp_path)
    with pytest.raises(InputFileError, match="does not exist"):
        load_tensors(tmp_path / "missing.safetensors")


def test_revela_lm_weights_with_an_infinity_are_refused(tmp_path):
    lm = nn.Linear(3, 2)
    save_lm_weights(lm, tmp_path)
    save_file(
        {"weight": torch.full((2, 3), math.inf), "bias": torch.zeros(2)}, str(tmp_path / "trainable.safetensors")
    )
    other = nn.Linear(3, 2)
    before = other.weight.detach().clone()
    with pytest.raises(InputFileError, match=r"trainable\.safetensors: tensor 'weight' holds 6 infinite"):
        load_lm_weights(other, tmp_path)
    assert torch.equal(other.weight.detach(), before)


def test_a_trainer_resuming_from_a_poisoned_checkpoint_stops_before_the_first_step(tiny_bert_dir, tmp_path):
    from conftest import TRAIN_SENTENCES, build_tiny_st, cpu_training_args
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer

    def trainer():
        model = build_tiny_st(tiny_bert_dir, normalize=False)
        loss = PartialNormInfoNCELoss(model, "cosine", scale="learnable")
        args = cpu_training_args(
            tmp_path, max_steps=4, per_device_train_batch_size=4, save_steps=2, disable_tqdm=True, logging_steps=1
        )
        data = Dataset.from_dict(
            {"anchor": TRAIN_SENTENCES, "positive": [s.split(" ", 1)[1] for s in TRAIN_SENTENCES]}
        )
        return SentenceTransformerTrainer(
            model=model, args=args, train_dataset=data, loss=loss, callbacks=[LossStateCallback(loss)]
        )

    # Given a run whose checkpoint-2 loss state was then overwritten with log_scale = -inf (scale 0)
    trainer().train()
    state_file = tmp_path / "checkpoint-2" / LOSS_STATE_FILENAME
    save_file({"scale.log_scale": torch.tensor(-math.inf)}, str(state_file))
    # When a fresh run resumes from it, the Trainer stops with the file and the key before any step
    resumed = trainer()
    with pytest.raises(InputFileError, match=r"checkpoint-2/loss_state\.safetensors: tensor 'scale\.log_scale'"):
        resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))


# --- property: any byte mutation of a valid state file loads (finite) or is one InputFileError naming the file -------

_MUTATION = st.tuples(
    st.sampled_from(["set", "insert", "delete", "truncate", "flip"]),
    st.floats(min_value=0.0, max_value=1.0, allow_nan=False),
    st.integers(min_value=0, max_value=255),
)


@pytest.fixture(scope="module")
def valid_state(tmp_path_factory) -> bytes:
    folder = tmp_path_factory.mktemp("state")
    return save_loss_state(_l2dir(), folder).read_bytes()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutations=st.lists(_MUTATION, min_size=1, max_size=4))
def test_any_mutation_of_a_state_file_loads_finite_or_names_the_file(valid_state, tmp_path, mutations):
    path = tmp_path / LOSS_STATE_FILENAME
    path.write_bytes(mutate_bytes(valid_state, mutations))
    loss = _l2dir()
    before = _held(loss)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            load_loss_state(loss, tmp_path)
    except InputFileError as exc:
        assert exc.file == str(path)
        assert all(torch.equal(before[n], t) for n, t in _held(loss).items())  # nothing half-copied
    else:
        assert all(torch.isfinite(t).all() for t in _held(loss).values())
