"""A full disk while `compare` writes a checkpoint (or the trained model): one line, exit 2, nothing half-written.

The disk fills at the second checkpoint (step 4): torch's ``torch.save`` of the optimizer state fails the way it does
on a full disk (``RuntimeError: [enforce fail at inline_container.cc:672] ...``), or writing ``trainer_state.json``
raises ``OSError(ENOSPC)``. Before, the traceback reached the user (exit 1) and a partial ``checkpoint-4`` stayed.
Now the partial checkpoint is removed, the error names what to do, and the re-run with space resumes from
``checkpoint-2`` to bit-identical weights.
"""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
import torch
from helpers.toy_beir import write_toy_beir
from safetensors.torch import load_file

from st_magnitude.cli import main

STEPS, SAVE = 6, 2


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_bert_dir):
    from conftest import build_tiny_st

    root = tmp_path_factory.mktemp("disk_full")
    build_tiny_st(tiny_bert_dir).save(str(root / "base"))
    data = root / "data"
    write_toy_beir(data / "beir" / "toy", n_docs=16, n_queries=4, split="test")
    write_toy_beir(data / "beir" / "toy", n_docs=16, n_queries=4, split="train", seed=1)
    return root / "base", data


def _argv(setup, out: Path) -> list[str]:
    model, data = setup
    return [
        "compare", "--model", str(model), "--variants", "cosine", "--train-data", "toy", "--eval-data", "toy",
        "--data-root", str(data), "--output", str(out), "--steps", str(STEPS), "--save-steps", str(SAVE),
        "--batch-size", "4", "--max-seq-length", "32", "--no-kappa", "--device", "cpu",
    ]  # fmt: skip


def _weights(out: Path) -> dict:
    folder = out / "runs" / "cosine-infonce" / "model"
    return {str(p.relative_to(folder)): load_file(p) for p in sorted(folder.rglob("*.safetensors"))}


def _fill_disk_at(monkeypatch, how: str, ckpt: str = "checkpoint-4") -> None:
    if how == "torch.save RuntimeError":
        real = torch.save

        def save(obj, f, *args, **kwargs):
            if ckpt in str(f):
                Path(f).write_bytes(b"PK\x03\x04 partial")  # what a full disk leaves: a truncated file
                raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 4096 vs 1234")
            return real(obj, f, *args, **kwargs)

        monkeypatch.setattr(torch, "save", save)
    else:
        from transformers.trainer_callback import TrainerState

        real_json = TrainerState.save_to_json

        def save_to_json(self, path):
            if ckpt in str(path):
                raise OSError(errno.ENOSPC, "No space left on device", str(path))
            return real_json(self, path)

        monkeypatch.setattr(TrainerState, "save_to_json", save_to_json)


@pytest.fixture(scope="module")
def reference(setup, tmp_path_factory):
    out = tmp_path_factory.mktemp("reference") / "out"
    assert main(_argv(setup, out)) == 0
    return _weights(out)


@pytest.mark.parametrize("how", ["torch.save RuntimeError", "trainer_state OSError(ENOSPC)"])
def test_full_disk_at_a_checkpoint_is_one_line_and_resumes_exactly(
    how, setup, reference, tmp_path, monkeypatch, capsys
):
    capsys.readouterr()

    out = tmp_path / "out"
    _fill_disk_at(monkeypatch, how)
    assert main(_argv(setup, out)) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "could not write the training checkpoint checkpoint-4" in err, err
    assert "it resumes from checkpoint-2" in err
    ckpts = out / "runs" / "cosine-infonce" / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir()) == ["checkpoint-2"]  # no partial checkpoint-4
    assert not (out / "runs" / "cosine-infonce" / "model").exists()
    monkeypatch.undo()

    assert main(_argv(setup, out)) == 0  # space freed: the same command resumes
    train = json.loads((out / "runs" / "cosine-infonce" / "train.json").read_text())
    assert train["resumed_from_step"] == 2
    a, b = _weights(out), reference
    assert a.keys() == b.keys() and a
    assert all(a[f][k].equal(b[f][k]) for f in a for k in a[f])


def test_full_disk_while_saving_the_model_removes_the_partial_model(setup, tmp_path, monkeypatch, capsys):
    from sentence_transformers import SentenceTransformer

    out = tmp_path / "out"
    real = SentenceTransformer.save

    def save(self, path, *args, **kwargs):
        if Path(path).name == "model":  # the run's final save (checkpoints save the model too)
            Path(path).mkdir(parents=True, exist_ok=True)
            (Path(path) / "model.safetensors").write_bytes(b"partial")
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(self, path, *args, **kwargs)

    monkeypatch.setattr(SentenceTransformer, "save", save)
    assert main(_argv(setup, out)) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "could not save the trained model" in err, err
    run = out / "runs" / "cosine-infonce"
    assert not (run / "model").exists() and not (run / "train.json").exists()
    assert err.count("error:") == 1 and "error: [Errno" not in err
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["checkpoint-4"]
