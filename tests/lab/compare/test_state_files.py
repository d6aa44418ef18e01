"""State files the compare job wrote and reads back (``config.json``, ``metrics.json``, ``base.json``,
``train.json``, a checkpoint's ``trainer_state.json``, the folder lock) pass the trust boundary: a missing one is
computed again, a corrupt or hand-edited one is one line naming the file (before: it was silently taken as absent,
or a ``TypeError`` traceback), and a checkpoint truncated by a kill is still removed as incomplete."""

from __future__ import annotations

import json
import os

import pytest

from st_magnitude._trust import InputFileError
from st_magnitude.lab.compare import compare, seeds, training
from st_magnitude.lab.engine import training as engine_training
from st_magnitude.lab.engine.lock import FolderLocked, OutputLock


@pytest.mark.parametrize(
    ("text", "expected"), [("{", "not valid JSON"), ("[1]", "must hold a JSON object"), ('{"a": NaN}', "NaN")]
)
def test_a_corrupt_record_of_the_job_is_named_not_taken_as_absent(tmp_path, text, expected):
    path = tmp_path / "metrics.json"
    assert compare._read_json(path) is None  # missing: computed again
    path.write_text(text)
    with pytest.raises(InputFileError, match=expected) as info:
        compare._read_json(path)
    assert info.value.file == str(path)


def test_a_hand_edited_fingerprint_is_named(tmp_path):
    (tmp_path / "runs" / "x").mkdir(parents=True)
    (tmp_path / "config.json").write_text('{"fingerprint": "seed 1"}')
    with pytest.raises(InputFileError, match=r"config\.json: key 'fingerprint': must be an object or null"):
        compare._check_fingerprint(tmp_path, None)


def test_train_json_of_a_finished_run_is_checked(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / ".complete").write_text("ok")
    assert training.trained_info(tmp_path) is None  # no train.json yet: trained again
    (tmp_path / "train.json").write_text('{"train_loss": "low", "train_seconds": 3}')
    with pytest.raises(InputFileError, match=r"train\.json: key 'train_loss': must be a number"):
        training.trained_info(tmp_path)
    (tmp_path / "train.json").write_text('{"train_loss": 0.5, "train_seconds": 3}')
    assert training.trained_info(tmp_path)["train_loss"] == 0.5


def _checkpoint(root, step: int, state: str):
    folder = root / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / engine_training.CHECKPOINT_STATE).write_text(state)
    return folder


def test_a_truncated_checkpoint_is_removed_and_a_hand_edited_one_is_named(tmp_path):
    name = engine_training.TrainProgress.NAME
    whole = {"global_step": 4, "stateful_callbacks": {name: {"attributes": {"loss_sum": 2.0, "loss_steps": 4,
                                                                             "seconds": 1.5}}}}  # fmt: skip
    kept = _checkpoint(tmp_path, 4, json.dumps(whole))
    cut = _checkpoint(tmp_path, 8, json.dumps(whole)[:30])  # a kill while the Trainer wrote it
    assert engine_training.whole_checkpoints(tmp_path, log=lambda m: None) == [kept] and not cut.exists()
    bad = json.loads(json.dumps(whole))
    bad["global_step"] = 12
    bad["stateful_callbacks"][name]["attributes"] = {"loss_sum": 2.0, "steps": 4}
    edited = _checkpoint(tmp_path, 12, json.dumps(bad))
    with pytest.raises(InputFileError, match=r"checkpoint-12/trainer_state\.json: key .*loss_steps'"):
        engine_training.whole_checkpoints(tmp_path, log=lambda m: None)
    assert edited.exists()  # named, not deleted


def test_seed_folders_with_a_corrupt_metrics_file_are_named(tmp_path):
    run = tmp_path / "seed-1" / "runs" / "cosine-infonce"
    run.mkdir(parents=True)
    (run / "metrics.json").write_text('{"metrics": [1, 2]}')
    with pytest.raises(InputFileError, match=r"metrics\.json: key 'metrics': must be an object"):
        seeds.aggregate_seeds([tmp_path / "seed-1"], tmp_path / "out")


def test_an_unreadable_lock_record_still_refuses_a_live_holder(tmp_path):
    holder = OutputLock(tmp_path).acquire()
    try:
        (tmp_path / ".lock").write_text('{"pid": [')  # the holder's record overwritten: still held by flock
        assert holder.holder() is None
        with pytest.raises(FolderLocked, match="its lock record is unreadable"):
            OutputLock(tmp_path).check_free()
    finally:
        os.close(holder._fd)
        holder._fd = None
