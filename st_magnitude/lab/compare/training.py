"""Training one run of the comparison: pairs, loss, Trainer arguments, resumable checkpoints, progress."""

from __future__ import annotations

import logging
import shutil
import time
import warnings
from pathlib import Path
from typing import Any

from st_magnitude._trust import Fields, InputFileError, read_json
from st_magnitude._trust.write import write_json_atomic
from st_magnitude.lab.compare.config import CompareConfig
from st_magnitude.lab.engine import dist as _dist
from st_magnitude.lab.engine.write_failure import checkpoint_write_failure, model_save_failure
from st_magnitude.losses._registry import compare_spec

logger = logging.getLogger(__name__)

__all__ = ["train_run", "training_pairs", "build_loss", "training_arguments", "trained_info", "whole_checkpoints"]


def load_base_model(name: str, device: str, max_seq_length: int, trust_remote_code: bool = False):
    """``(model, description, source)`` of the base model, loaded by :func:`~st_magnitude.model.load_model`.

    That loader refuses code outside sentence-transformers and st-magnitude unless ``trust_remote_code=True`` (CLI
    ``--trust-remote-code``) and falls back to the offline all-MiniLM-L6-v2 wheel; ``source`` is what it loaded, so a
    run reloads the very same model.
    """
    from st_magnitude.model.load import load_model_and_source

    model, source, desc = load_model_and_source(
        name, device=device, max_seq_length=max_seq_length, trust_remote_code=trust_remote_code
    )
    return model, desc, source


def training_pairs(folder: Path, n: int, seed: int) -> dict[str, list[str]]:
    """n seeded (query, relevant document) pairs from the dataset's train split (dev/test if there is none)."""
    from st_magnitude.data.beir import load_beir
    from st_magnitude.data.eval_set import shuffled_pairs

    split = next((s for s in ("train", "dev", "test") if (folder / "qrels" / f"{s}.tsv").is_file()), None)
    if split is None:
        raise FileNotFoundError(f"{folder} has no qrels to train on")
    pairs = shuffled_pairs(load_beir(folder, split), seed)  # an unknown id is an error, not a dropped pair
    # one positive per query per batch is what the no-duplicates sampler enforces; keep the pool large enough
    pairs = pairs[: max(n * 3, n)]
    return {"anchor": [p[0] for p in pairs], "positive": [p[1] for p in pairs], "split": split}


def build_loss(model, variant: str, loss: str, config: CompareConfig):
    """The loss ``compare`` trains as ``loss``, built as its registry entry says (st_magnitude/losses/_registry.py):
    the variant as ``similarity``, the CompareConfig fields it names, and gathering under ``torchrun``."""
    import importlib

    spec = compare_spec(loss)
    kwargs = {keyword: getattr(config, field) for keyword, field in spec.compare_kwargs}
    if spec.takes_similarity:
        kwargs["similarity"] = variant
    if spec.gathers:  # under torchrun every process scores its rows against the global batch
        kwargs["gather_across_devices"] = _dist.distributed()
    cls = getattr(importlib.import_module(f"st_magnitude.losses.{spec.module}"), spec.name)
    return cls(model, **kwargs)


CHECKPOINT_STATE = "trainer_state.json"  # the Trainer writes it last into a checkpoint: its presence marks a whole one


def whole_checkpoints(ckpt_dir: Path, log=logger.warning) -> list[Path]:
    """The checkpoints a resume can use, oldest first; incomplete ones are removed.

    A kill during a checkpoint save leaves a folder without (or with a truncated) ``trainer_state.json``, the last
    file the Trainer writes; one without this module's progress record was not written by this version. Both are
    removed so the run resumes from the last whole checkpoint (or starts over when none is left).
    """
    if not ckpt_dir.is_dir():
        return []
    found = []
    for folder in ckpt_dir.iterdir():
        step = folder.name.removeprefix("checkpoint-")
        if folder.is_dir() and folder.name.startswith("checkpoint-") and step.isdigit():
            found.append((int(step), folder))
    whole = []
    for step, folder in sorted(found):
        try:  # the Trainer writes this file in place: a kill while it saves leaves it truncated
            state = Fields(read_json(folder / CHECKPOINT_STATE), folder / CHECKPOINT_STATE)
        except InputFileError:
            ok = False
        else:
            ok = state.obj.get("global_step") == step and _TrainProgress.from_state(state) is not None
        if ok:
            whole.append(folder)
        else:
            log(f"removing incomplete checkpoint {folder} (interrupted while it was saved)")
            shutil.rmtree(folder, ignore_errors=True)
    return whole


class _TrainProgress:
    """Whole-run training loss and time, kept in every checkpoint's trainer_state.json so a resume continues them.

    The Trainer's own ``training_loss`` and runtime cover only the steps of the current ``train()`` call; this
    records every loss the loss module returns (a forward hook) and the seconds spent. Its Trainer callback
    (:func:`_progress_callback`) is a stateful one, so the Trainer saves it inside the file that marks a checkpoint
    whole.
    """

    NAME = "CompareTrainProgress"  # the callback's class name: its key in trainer_state.json "stateful_callbacks"

    def __init__(self, loss_sum: float = 0.0, loss_steps: int = 0, seconds: float = 0.0):
        self.loss_sum, self.loss_steps, self.seconds = float(loss_sum), int(loss_steps), float(seconds)
        self._t0: float | None = None

    @classmethod
    def from_state(cls, trainer_state: Fields) -> _TrainProgress | None:
        """The progress saved in a checkpoint's ``trainer_state.json`` (``None`` when it holds none: not written
        by this module); a record of the wrong shape is an :class:`~st_magnitude._trust.InputFileError`."""
        callbacks = trainer_state.get("stateful_callbacks", (dict, type(None)), None) or {}
        if cls.NAME not in callbacks:
            return None
        saved = trainer_state.sub("stateful_callbacks").sub(cls.NAME).sub("attributes")
        return cls(
            saved.get("loss_sum", float),
            saved.get("loss_steps", int, lo=0),
            saved.get("seconds", float, lo=0),
        )

    def record(self, module, inputs, output) -> None:  # called by train_run's forward hook with the summed loss
        self.loss_sum += float(output)
        self.loss_steps += 1

    def start(self) -> None:
        self._t0 = time.perf_counter()

    def elapsed(self) -> float:
        return self.seconds + (time.perf_counter() - self._t0 if self._t0 is not None else 0.0)

    def attributes(self) -> dict[str, float]:
        return {"loss_sum": self.loss_sum, "loss_steps": self.loss_steps, "seconds": self.elapsed()}


def _progress_callback(progress: _TrainProgress):
    """A Trainer callback saving ``progress`` into each checkpoint (transformers is imported only when training)."""
    from transformers import TrainerCallback
    from transformers.trainer_callback import ExportableState

    class CompareTrainProgress(TrainerCallback, ExportableState):
        def on_train_begin(self, args, state, control, **kwargs):
            progress.start()

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step >= state.max_steps:
                control.should_save = (
                    False  # the model is saved next: a last checkpoint would be written to be deleted
                )

        def state(self) -> dict:
            attributes = progress.attributes()
            return {"args": {}, "attributes": attributes}

    return CompareTrainProgress()


#: The learnable similarity's role parameters carried by the model (γ̂ of queries and documents).
ROLE_PARAMETERS = r"gamma_(query|document)_logit"


def training_arguments(config: CompareConfig, variant: str, ckpt_dir: Path, device: str):
    """The Trainer settings of one run (the profile's optimizer and schedule; see ``PROFILES``)."""
    from sentence_transformers import SentenceTransformerTrainingArguments
    from sentence_transformers.base.sampler import BatchSamplers

    gamma_lr = config.gamma_learning_rate
    distributed = _dist.distributed()
    return SentenceTransformerTrainingArguments(
        output_dir=str(ckpt_dir),
        max_steps=config.steps,
        # under torchrun the sampler draws the 1-process global batch of --batch-size rows (same seed, same rows)
        # and accelerate splits it, batch_size / world_size rows per process (see docs/compare.md)
        per_device_train_batch_size=config.batch_size,
        accelerator_config={"split_batches": True} if distributed else None,
        ddp_backend=("gloo" if device == "cpu" else "nccl") if distributed else None,
        learning_rate=config.learning_rate,
        lr_scheduler_type=config.lr_scheduler,
        warmup_steps=max(1, round(config.steps * config.warmup_fraction)) if config.warmup_fraction > 0 else 0,
        weight_decay=config.weight_decay,
        adam_beta1=0.9,
        adam_beta2=config.adam_beta2,
        adam_epsilon=1e-8,
        max_grad_norm=1.0,
        seed=config.seed,
        data_seed=config.seed,
        batch_sampler=BatchSamplers.NO_DUPLICATES,
        router_mapping={"anchor": "query", "positive": "document"},
        # quick: γ̂ gets its own learning rate (at encoder LRs it barely moves); full: as the paper
        learning_rate_mapping={ROLE_PARAMETERS: gamma_lr} if variant == "learnable" and gamma_lr else {},
        save_strategy="steps",
        save_steps=config.save_steps or max(10, config.steps // 5),
        save_total_limit=1,  # plus the one being written: at most two checkpoints exist at any time
        save_only_model=False,  # resuming bit-identically needs the optimizer, scheduler and RNG states
        logging_steps=max(1, config.steps // 10),
        report_to=[],
        use_cpu=device == "cpu",
        dataloader_drop_last=True,
        disable_tqdm=False,
    )


def train_run(
    base_path: str, variant: str, loss_name: str, config: CompareConfig, pairs: dict, run_dir: Path, device: str
) -> dict[str, Any]:
    """Train one run (resuming from its last whole checkpoint) and save it; returns what goes into train.json.

    Finish sequence, each step safe to interrupt: the model is saved, ``train.json`` is written, then
    ``model/.complete``; only then are the checkpoints removed. A run counts as trained when both ``.complete`` and
    ``train.json`` exist, so a kill anywhere before that resumes training from the last checkpoint instead of
    leaving the run stuck. No checkpoint is written at the last step (the model is saved right after).
    """
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer

    from st_magnitude.model.convert import apply_similarity

    model, _, _ = load_base_model(base_path, device, config.max_seq_length, config.trust_remote_code)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        apply_similarity(model, variant, warn_on_strip=False)  # compare's own choice: its report shows the norms
    loss = build_loss(model, variant, loss_name, config)
    n = config.steps * config.batch_size
    data = Dataset.from_dict({"anchor": pairs["anchor"][: n * 2], "positive": pairs["positive"][: n * 2]})
    ckpt_dir = run_dir / "checkpoints"

    def pick_checkpoint() -> Path | None:  # rank 0 tidies the folder and decides for every process
        checkpoints = whole_checkpoints(ckpt_dir)
        for older in checkpoints[:-1]:
            shutil.rmtree(older, ignore_errors=True)  # resuming needs the last one only
        return checkpoints[-1] if checkpoints else None

    resume_from = _dist.rank0_decides(pick_checkpoint)
    args = training_arguments(config, variant, ckpt_dir, device)
    progress = _TrainProgress()
    if resume_from is not None:
        state_file = resume_from / CHECKPOINT_STATE
        progress = _TrainProgress.from_state(Fields(read_json(state_file), state_file))
        logger.info("resuming %s from %s", run_dir.name, resume_from)

    def record(module, inputs, output) -> None:
        # a gathering loss returns this process's share of the global-batch loss: their mean is the 1-process loss
        if isinstance(output, dict):  # named parts (L2Dir: infonce + infotn): the Trainer optimises their sum
            output = sum(v.detach() for v in output.values())
        progress.record(module, inputs, _dist.mean(output))

    hook = loss.register_forward_hook(record)
    # the loss calls the model once per column; a role's γ̂ is used in one of the calls only, which DDP's unused-
    # parameter search (needed: the HF pooler gets no gradient) would mark ready twice: γ̂ is averaged by hand instead
    _dist.sync_outside_ddp(model, ROLE_PARAMETERS)
    from st_magnitude.callbacks import LossStateCallback  # the L2Dir NAP head lives in the loss: keep it on resume

    callbacks = [_progress_callback(progress), LossStateCallback(loss, on_missing="warn")]
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=data, loss=loss, callbacks=callbacks)
    try:
        trainer.train(resume_from_checkpoint=str(resume_from) if resume_from is not None else None)
    except (OSError, RuntimeError) as exc:  # a full disk during a checkpoint: remove it, say so in one line
        failure = checkpoint_write_failure(exc, ckpt_dir, whole_checkpoints)
        if failure is None:
            raise
        raise failure from exc
    finally:
        hook.remove()
    info = {
        "train_loss": progress.loss_sum / max(progress.loss_steps, 1),
        "train_seconds": progress.elapsed(),
        "train_steps": progress.loss_steps,
        "resumed": resume_from is not None,
        "resumed_from_step": int(resume_from.name.removeprefix("checkpoint-")) if resume_from is not None else None,
    }
    from st_magnitude.model.info import model_gammas

    g = model_gammas(model)
    if g is not None:
        info.update(gamma_query=g[0], gamma_document=g[1])
    model_dir = run_dir / "model"

    def finish() -> None:  # rank 0 writes; the others wait so nobody reads a half-written run
        if model_dir.exists():
            shutil.rmtree(model_dir)
        try:
            model.save(str(model_dir))
        except Exception as exc:  # noqa: BLE001 - a write error becomes one OSError; anything else is re-raised
            failure = model_save_failure(exc, model_dir)
            if failure is None:
                raise
            raise failure from exc
        write_json_atomic(run_dir / "train.json", info)
        (model_dir / ".complete").write_text("ok")
        shutil.rmtree(ckpt_dir, ignore_errors=True)

    _dist.rank0_only(finish)
    return info


def trained_info(run_dir: Path) -> dict[str, Any] | None:
    """train.json of a finished training (``model/.complete`` and a readable ``train.json``), else None."""
    if not (run_dir / "model" / ".complete").exists() or not (run_dir / "train.json").is_file():
        return None
    info = Fields(read_json(run_dir / "train.json"), run_dir / "train.json")
    for key in ("train_loss", "train_seconds"):
        info.get(key, float)
    return info.obj
