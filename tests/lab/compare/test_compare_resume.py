"""Interrupting and re-running `st-magnitude compare` on a tiny model and toy BEIR folders.

Interruptions are made deterministic by raising KeyboardInterrupt (or sending SIGINT) from inside the loss's
forward at a chosen step, i.e. in the middle of a training step, after the checkpoints before it were written.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers.toy_beir import write_toy_beir
from safetensors.torch import load_file

from st_magnitude._trust import Fields
from st_magnitude.cli.compare import INTERRUPT_HINT
from st_magnitude.lab.compare import compare as C
from st_magnitude.lab.compare import training as T
from st_magnitude.lab.compare.config import CompareConfig
from st_magnitude.lab.engine import training as ET

REPO = Path(__file__).resolve().parents[3]
#: Each test trains (and re-trains after an interruption) compare runs: minutes of CPU, outside the default run.
pytestmark = pytest.mark.heavy
STEPS, SAVE = 8, 2


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_bert_dir):
    from conftest import build_tiny_st

    root = tmp_path_factory.mktemp("compare_resume")
    build_tiny_st(tiny_bert_dir).save(str(root / "base"))
    data = root / "data"  # the data folder: BEIR datasets under beir/
    write_toy_beir(data / "beir" / "toy", n_docs=24, n_queries=6, split="test")
    write_toy_beir(data / "beir" / "toy", n_docs=24, n_queries=6, split="train", seed=1)
    write_toy_beir(data / "beir" / "other", n_docs=16, n_queries=4, seed=2)
    return root / "base", data


def cfg(setup, out, **kw) -> CompareConfig:
    model_dir, data = setup
    base = dict(
        model=str(model_dir),
        variants=("learnable",),
        train_data="toy",
        eval_data=("toy",),
        data_dir=str(data),
        output_dir=str(out),
        steps=STEPS,
        save_steps=SAVE,
        batch_size=4,
        max_seq_length=32,
        max_corpus=None,
        max_queries=None,
        kappa=False,
        kappa_pairs=8,
        kappa_bootstrap=3,
        learning_rate=1e-3,
    )
    base.update(kw)
    return CompareConfig(**base)


def quiet(_line: str) -> None:
    pass


def weights(out: Path, run: str = "learnable-infonce") -> dict:
    folder = out / "runs" / run / "model"
    return {str(p.relative_to(folder)): load_file(p) for p in sorted(folder.rglob("*.safetensors"))}


def assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys() and a
    for name in a:
        assert a[name].keys() == b[name].keys()
        for key in a[name]:
            assert a[name][key].equal(b[name][key]), f"{name}:{key} differs"


def no_time(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "train_seconds"} for r in rows]


def interrupt_at(monkeypatch, step: int) -> None:
    """Raise KeyboardInterrupt in the loss forward of training step ``step`` (1-based, counted over the run)."""
    real = ET.TrainProgress.record

    def record(self, module, inputs, output):
        real(self, module, inputs, output)
        if self.loss_steps == step:
            raise KeyboardInterrupt

    monkeypatch.setattr(ET.TrainProgress, "record", record)


@pytest.fixture(scope="module")
def reference(setup, tmp_path_factory):
    """One uninterrupted run: its weights, train.json and rows."""
    out = tmp_path_factory.mktemp("reference") / "out"
    result = C.run_compare(cfg(setup, out), log=quiet)
    return {
        "weights": weights(out),
        "train": json.loads((out / "runs" / "learnable-infonce" / "train.json").read_text()),
        "rows": result["rows"],
        "out": out,
    }


def test_resume_is_bit_identical_and_reports_the_whole_run(setup, reference, tmp_path, monkeypatch):
    out = tmp_path / "out"
    interrupt_at(monkeypatch, 5)  # checkpoints at steps 2 and 4 were written; step 5 is cut short
    with pytest.raises(KeyboardInterrupt):
        C.run_compare(cfg(setup, out), log=quiet)
    monkeypatch.undo()
    ckpts = out / "runs" / "learnable-infonce" / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir() if p.name.startswith("checkpoint-")) == ["checkpoint-4"]
    assert not (out / ".lock").exists()  # the lock is released on the way out
    state_file = ckpts / "checkpoint-4" / "trainer_state.json"
    first_part = ET.TrainProgress.from_state(Fields(json.loads(state_file.read_text()), state_file))
    assert first_part.loss_steps == 4 and first_part.seconds > 0

    result = C.run_compare(cfg(setup, out), log=quiet)
    train = json.loads((out / "runs" / "learnable-infonce" / "train.json").read_text())
    assert_same_weights(weights(out), reference["weights"])
    assert train["resumed"] and train["resumed_from_step"] == 4
    # the whole run's figures, not the resumed steps' (issue: 1.685 resumed vs 1.884 uninterrupted)
    assert train["train_steps"] == reference["train"]["train_steps"] == STEPS
    assert train["train_loss"] == reference["train"]["train_loss"]
    assert [r["train_loss"] for r in result["rows"]] == [r["train_loss"] for r in reference["rows"]]
    assert train["train_seconds"] > first_part.seconds  # both parts' time
    assert not ckpts.exists()  # checkpoints are removed once the model is saved


def test_incomplete_checkpoint_is_removed_and_training_resumes_from_the_last_whole_one(
    setup, reference, tmp_path, monkeypatch
):
    out = tmp_path / "out"
    interrupt_at(monkeypatch, 5)
    with pytest.raises(KeyboardInterrupt):
        C.run_compare(cfg(setup, out), log=quiet)
    monkeypatch.undo()
    ckpts = out / "runs" / "learnable-infonce" / "checkpoints"
    # a kill during the save of checkpoint 6: everything but trainer_state.json (the Trainer writes it last) ...
    shutil.copytree(ckpts / "checkpoint-4", ckpts / "checkpoint-6")
    (ckpts / "checkpoint-6" / "trainer_state.json").unlink()
    # ... and one whose trainer_state.json was cut off mid-write
    shutil.copytree(ckpts / "checkpoint-4", ckpts / "checkpoint-7")
    text = (ckpts / "checkpoint-7" / "trainer_state.json").read_text()
    (ckpts / "checkpoint-7" / "trainer_state.json").write_text(text[: len(text) // 2])

    C.run_compare(cfg(setup, out), log=quiet)
    train = json.loads((out / "runs" / "learnable-infonce" / "train.json").read_text())
    assert train["resumed_from_step"] == 4
    assert_same_weights(weights(out), reference["weights"])
    assert train["train_loss"] == reference["train"]["train_loss"]


def test_kill_during_the_finish_sequence_is_recoverable(setup, reference, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(reference["out"], out)
    run = out / "runs" / "learnable-infonce"
    # the old finish order could leave model/.complete without train.json: every re-run then failed
    (run / "train.json").unlink()
    (run / "metrics.json").unlink()
    logs: list[str] = []
    result = C.run_compare(cfg(setup, out), log=logs.append)
    assert any("training again" in line for line in logs)
    assert json.loads((run / "train.json").read_text())["train_loss"] == reference["train"]["train_loss"]
    assert no_time(result["rows"]) == no_time(reference["rows"])
    assert_same_weights(weights(out), reference["weights"])

    # a kill after train.json but before .complete (the new order) resumes training as well
    (run / "model" / ".complete").unlink()
    (run / "metrics.json").unlink()
    logs.clear()
    assert no_time(C.run_compare(cfg(setup, out), log=logs.append)["rows"]) == no_time(reference["rows"])
    assert any("[learnable-infonce] training" in line for line in logs)


def test_added_eval_data_is_evaluated_and_the_table_holds_exactly_the_requested_datasets(setup, reference, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(reference["out"], out)
    logs: list[str] = []
    both = C.run_compare(cfg(setup, out, eval_data=("toy", "other")), log=logs.append)
    assert any("trained earlier: evaluating other" in line for line in logs)
    assert [(r["run"], r["dataset"]) for r in both["rows"]] == [
        ("learnable-infonce", "toy"),
        ("learnable-infonce", "other"),
    ]
    assert both["rows"][0] == reference["rows"][0]  # toy's metrics are kept, not recomputed
    assert "| learnable-infonce | other |" in (out / "results.md").read_text()

    # a re-run naming only `other` reports only `other`: no dataset under a header that does not name it
    only = C.run_compare(cfg(setup, out, eval_data=("other",)), log=quiet)
    assert [r["dataset"] for r in only["rows"]] == ["other"]
    text = (out / "results.md").read_text()
    assert "| toy |" not in text and "- other:" in text and "- toy:" not in text
    assert "toy" not in (out / "results.csv").read_text()

    # other subsampling settings are a different evaluation: re-evaluated, training kept
    logs.clear()
    C.run_compare(cfg(setup, out, eval_data=("toy",), max_corpus=20), log=logs.append)
    assert any("trained earlier: evaluating toy" in line for line in logs)


def test_kappa_is_recomputed_when_its_settings_change(setup, reference, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(reference["out"], out)
    C.run_compare(cfg(setup, out, kappa=True, kappa_pairs=8), log=quiet)
    first = json.loads((out / "kappa.json").read_text())
    assert first["settings"]["pairs"] == 8
    C.run_compare(cfg(setup, out, kappa=True, kappa_pairs=12), log=quiet)
    assert json.loads((out / "kappa.json").read_text())["settings"]["pairs"] == 12


def test_changed_training_settings_are_refused_with_the_differences_named(setup, reference, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(reference["out"], out)
    with pytest.raises(ValueError, match=r"learning_rate 0\.001 there, 0\.002 now"):
        C.run_compare(cfg(setup, out, learning_rate=2e-3), log=quiet)
    with pytest.raises(ValueError, match="lr_scheduler 'linear' there, 'cosine' now"):
        C.run_compare(cfg(setup, out, lr_scheduler="cosine"), log=quiet)


def test_failed_data_validation_writes_nothing_and_binds_nothing(setup, tmp_path):
    model_dir, data = setup
    bad = tmp_path / "bad"
    shutil.copytree(data / "beir" / "other", bad)
    (bad / "corpus.jsonl").write_text('{"_id": "d0", "text": "a"}\nnot json\n')
    out = tmp_path / "out"
    with pytest.raises(ValueError):
        C.run_compare(cfg(setup, out, eval_data=("toy", str(bad))), log=quiet)
    assert not out.exists()

    # a config.json left without any run (e.g. by an older version) does not make the folder refuse other settings
    out.mkdir()
    (out / "config.json").write_text(json.dumps({"fingerprint": {"steps": 999}}))
    C.run_compare(cfg(setup, out, steps=2), log=quiet)
    assert (out / "runs" / "learnable-infonce" / "metrics.json").exists()


def test_at_most_one_checkpoint_is_kept_and_none_at_the_last_step(setup, tmp_path, monkeypatch):
    out = tmp_path / "out"
    seen: list[list[str]] = []
    real = ET.TrainProgress.record
    ckpts = out / "runs" / "learnable-infonce" / "checkpoints"

    def record(self, module, inputs, output):
        real(self, module, inputs, output)
        seen.append(sorted(p.name for p in ckpts.glob("checkpoint-*")) if ckpts.is_dir() else [])

    monkeypatch.setattr(ET.TrainProgress, "record", record)
    C.run_compare(cfg(setup, out), log=quiet)
    assert max(len(s) for s in seen) == 1  # the previous one is rotated away once the next is whole
    assert seen[-1] == ["checkpoint-6"]  # before the last step; no checkpoint-8 is written
    assert not ckpts.exists()


def test_ctrl_c_prints_one_line_and_a_rerun_resumes(setup, reference, tmp_path):
    out = tmp_path / "out"
    model_dir, data = setup
    argv = [
        "compare",
        "--model",
        str(model_dir),
        "--variants",
        "learnable",
        "--train-data",
        "toy",
        "--eval-data",
        "toy",
        "--data-root",
        str(data),
        "--output",
        str(out),
        "--steps",
        str(STEPS),
        "--batch-size",
        "4",
        "--max-seq-length",
        "32",
        "--learning-rate",
        "1e-3",
        "--max-corpus",
        "0",
        "--max-queries",
        "0",
        "--save-steps",
        str(SAVE),
        "--no-kappa",
    ]
    # a real SIGINT, sent by the process to itself in the middle of training step 5
    script = f"""
import os, signal, sys
from st_magnitude.lab.compare import compare as C
from st_magnitude.lab.compare import training as T
from st_magnitude.lab.engine import training as ET
real = ET.TrainProgress.record
def record(self, *a):
    real(self, *a)
    if self.loss_steps == 5:
        os.kill(os.getpid(), signal.SIGINT)
ET.TrainProgress.record = record
from st_magnitude.cli import main
sys.exit(main({argv!r}))
"""
    # the same intra-op thread count as this process, which resumes the run: bit-identity needs the same reductions
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": str(torch.get_num_threads())}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 130, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == f"st-magnitude compare: interrupted; {INTERRUPT_HINT}"

    C.run_compare(cfg(setup, out), log=quiet)
    train = json.loads((out / "runs" / "learnable-infonce" / "train.json").read_text())
    assert train["resumed_from_step"] == 4
    assert_same_weights(weights(out), reference["weights"])


def test_full_profile_trains_with_paper_000_app_b_settings(tmp_path, monkeypatch):
    """--full is paper 000's recipe (App. B, Table 8) where one machine allows."""
    from st_magnitude.cli import build_parser
    from st_magnitude.cli import compare as compare_cli

    captured = {}
    args = build_parser().parse_args(["compare", "--full", "--output", str(tmp_path / "o")])
    monkeypatch.setattr(C, "run_compare", lambda config, log=print: captured.setdefault("config", config))
    assert compare_cli.run(args) == 0
    config = captured["config"]
    a = T.training_arguments(config, "learnable", tmp_path, "cpu")
    assert (a.learning_rate, a.lr_scheduler_type.value, a.warmup_steps) == (5e-6, "cosine", 0)
    assert (a.weight_decay, a.adam_beta1, a.adam_beta2, a.adam_epsilon, a.max_grad_norm) == (
        0.01,
        0.9,
        0.98,
        1e-8,
        1.0,
    )
    assert a.per_device_train_batch_size == 128 and config.scale == 20.0
    assert not a.learning_rate_mapping  # γ̂ trains with the encoder's settings (the paper names no other)
    quick = T.training_arguments(CompareConfig(), "learnable", tmp_path, "cpu")
    assert quick.learning_rate_mapping == {r"gamma_(query|document)_logit": 1e-2}  # quick's own choice
    assert quick.lr_scheduler_type.value == "linear" and quick.warmup_steps == 2
    assert "departs from the paper" in compare_cli._description()


def test_a_loss_with_named_parts_is_recorded_as_their_sum(setup, tmp_path, monkeypatch):
    """L2DirLoss returns {"infonce", "infotn"}; the Trainer optimises (and reports) their sum."""
    out = tmp_path / "out"
    parts: list[dict[str, float]] = []
    real = T.build_loss

    def build_loss(*args, **kwargs):  # the parts each step returned, seen independently of compare's own hook
        loss = real(*args, **kwargs)
        loss.register_forward_hook(lambda m, i, o: parts.append({k: float(v) for k, v in o.items()}))
        return loss

    monkeypatch.setattr(T, "build_loss", build_loss)
    C.run_compare(cfg(setup, out, variants=("cosine",), losses=("l2dir",), steps=2), log=quiet)
    train = json.loads((out / "runs" / "cosine-l2dir" / "train.json").read_text())
    assert train["train_steps"] == len(parts) == 2
    assert all(set(p) == {"infonce", "infotn"} and p["infotn"] > 0 for p in parts)  # one part alone would differ
    assert train["train_loss"] == pytest.approx(sum(sum(p.values()) for p in parts) / 2, rel=1e-6)


def test_l2dir_resume_restores_the_nap_head(setup, tmp_path, monkeypatch):
    # The NAP head lives in the loss, not the model: a resume that re-creates it untrained changes the steps after
    # the checkpoint (InfoTN's gradient reaches the encoder through the head), so the final weights would differ.
    l2dir = dict(variants=("cosine",), losses=("l2dir",))
    ref_out = tmp_path / "reference"
    C.run_compare(cfg(setup, ref_out, **l2dir), log=quiet)
    out = tmp_path / "out"
    interrupt_at(monkeypatch, 5)
    with pytest.raises(KeyboardInterrupt):
        C.run_compare(cfg(setup, out, **l2dir), log=quiet)
    monkeypatch.undo()
    ckpt = out / "runs" / "cosine-l2dir" / "checkpoints" / "checkpoint-4"
    assert (ckpt / "loss_state.safetensors").is_file()
    C.run_compare(cfg(setup, out, **l2dir), log=quiet)
    assert_same_weights(weights(out, "cosine-l2dir"), weights(ref_out, "cosine-l2dir"))
