"""Training in the lab: one set of Trainer settings (:class:`TrainSpec`) and one Trainer call for compare and
replicate, plus the resumable-checkpoint bookkeeping compare uses (whole checkpoints, whole-run loss and time).

Every Trainer argument either workflow sets is a field of :class:`TrainSpec`; :func:`trainer_arguments` is the one
place that turns it into ``SentenceTransformerTrainingArguments``, so the two workflows cannot drift apart on a
setting neither of them chose (the optimiser's betas and epsilon, gradient clipping, dropping the last batch).
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from st_magnitude._trust import Fields, InputFileError, read_json

logger = logging.getLogger(__name__)

__all__ = [
    "CHECKPOINT_STATE",
    "TrainProgress",
    "TrainSpec",
    "progress_callback",
    "train",
    "trainer_arguments",
    "whole_checkpoints",
]

#: The Trainer's batch samplers by the name a spec gives them.
SAMPLERS = ("no_duplicates", "batch_sampler")


@dataclass(frozen=True)
class TrainSpec:
    """What the Trainer is told, in one typed record (defaults: the Trainer's own, stated).

    ``warmup_steps`` is a number of steps (each workflow rounds its own fraction); ``save_steps=None`` writes no
    checkpoint; ``eval_steps`` evaluates the Trainer's ``evaluator`` every so many steps; ``distributed`` splits the
    global batch over torchrun processes (accelerate ``split_batches``) on gloo (CPU) or nccl.
    """

    output_dir: str
    steps: int
    batch_size: int
    learning_rate: float
    seed: int
    device: str = "cpu"
    bf16: bool = False
    warmup_steps: int = 0
    lr_scheduler: str = "linear"
    weight_decay: float = 0.0
    adam_beta2: float = 0.999
    max_grad_norm: float = 1.0
    sampler: str | Any = "no_duplicates"
    router_mapping: dict[str, str] = field(default_factory=dict)
    learning_rate_mapping: dict[str, float] = field(default_factory=dict)
    save_steps: int | None = None
    logging_steps: int | None = None
    progress_bar: bool = False
    eval_steps: int | None = None
    distributed: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1:
            raise ValueError(f"steps and batch_size must be >= 1, got {self.steps} and {self.batch_size}")
        if isinstance(self.sampler, str) and self.sampler not in SAMPLERS:
            raise ValueError(
                f"sampler must be one of {', '.join(SAMPLERS)} (or a BatchSamplers value), got {self.sampler!r}"
            )


def _sampler(value: str | Any):
    from sentence_transformers.base.sampler import BatchSamplers

    if isinstance(value, str):
        return {"no_duplicates": BatchSamplers.NO_DUPLICATES, "batch_sampler": BatchSamplers.BATCH_SAMPLER}[value]
    return value


def trainer_arguments(spec: TrainSpec):
    """``SentenceTransformerTrainingArguments`` for ``spec``: the one place either workflow builds them."""
    from sentence_transformers import SentenceTransformerTrainingArguments

    checkpoints = spec.save_steps is not None
    chosen = dict(
        output_dir=spec.output_dir,
        max_steps=spec.steps,
        per_device_train_batch_size=spec.batch_size,
        accelerator_config={"split_batches": True} if spec.distributed else None,
        ddp_backend=("gloo" if spec.device == "cpu" else "nccl") if spec.distributed else None,
        learning_rate=spec.learning_rate,
        lr_scheduler_type=spec.lr_scheduler,
        warmup_steps=spec.warmup_steps,
        weight_decay=spec.weight_decay,
        adam_beta1=0.9,
        adam_beta2=spec.adam_beta2,
        adam_epsilon=1e-8,
        max_grad_norm=spec.max_grad_norm,
        seed=spec.seed,
        data_seed=spec.seed,
        batch_sampler=_sampler(spec.sampler),
        router_mapping=dict(spec.router_mapping),
        learning_rate_mapping=dict(spec.learning_rate_mapping),
        save_strategy="steps" if checkpoints else "no",
        save_steps=spec.save_steps if checkpoints else 500,
        save_total_limit=1 if checkpoints else None,  # plus the one being written: at most two exist at any time
        save_only_model=False,  # resuming bit-identically needs the optimizer, scheduler and RNG states
        logging_steps=spec.logging_steps or max(1, spec.steps // 10),
        report_to=[],
        use_cpu=spec.device == "cpu",
        bf16=spec.bf16,
        dataloader_drop_last=True,
        disable_tqdm=not spec.progress_bar,
        eval_strategy="steps" if spec.eval_steps else "no",
        eval_steps=spec.eval_steps,
    )
    _check_extra(spec.extra, chosen, SentenceTransformerTrainingArguments)
    return SentenceTransformerTrainingArguments(**chosen, **spec.extra)


def _check_extra(extra: dict[str, Any], chosen: dict[str, Any], arguments_class) -> None:
    """Refuse ``extra`` keys the spec already sets (a second value would silently win or clash) and keys that are no
    Trainer argument (a typo), naming the allowed alternatives."""
    clash = sorted(set(extra) & set(chosen))
    if clash:
        raise ValueError(
            f"TrainSpec.extra sets {', '.join(clash)}, which the spec itself sets: use the TrainSpec field for it "
            f"(extra is for the Trainer arguments the spec does not choose)"
        )
    known = {f.name for f in fields(arguments_class)}
    unknown = sorted(set(extra) - known)
    if unknown:
        raise ValueError(
            f"TrainSpec.extra has {', '.join(unknown)}, which is no argument of {arguments_class.__name__}; "
            "allowed: its fields, e.g. gradient_accumulation_steps, fp16, optim"
        )


def train(
    model,
    loss,
    data,
    spec: TrainSpec,
    *,
    callbacks: list | None = None,
    evaluator=None,
    data_collator=None,
    resume_from: str | Path | None = None,
) -> dict[str, float]:
    """Train ``model`` with ``loss`` on ``data`` (a column dict or a ``datasets.Dataset``) as ``spec`` says.

    Returns the Trainer's mean training loss of this call and its wall seconds; ``resume_from`` continues from a
    checkpoint that :func:`whole_checkpoints` kept.
    """
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer

    dataset = data if isinstance(data, Dataset) else Dataset.from_dict(data)
    trainer = SentenceTransformerTrainer(
        model=model,
        args=trainer_arguments(spec),
        train_dataset=dataset,
        loss=loss,
        callbacks=callbacks,
        evaluator=evaluator,
        data_collator=data_collator,
    )
    t0 = time.perf_counter()
    result = trainer.train(resume_from_checkpoint=str(resume_from) if resume_from is not None else None)
    return {"train_loss": float(result.training_loss), "train_seconds": time.perf_counter() - t0}


# ------------------------------------------------------------------------------------------------------------------
# resumable checkpoints: whole ones only, with the whole run's loss and time
# ------------------------------------------------------------------------------------------------------------------
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
            ok = state.obj.get("global_step") == step and TrainProgress.from_state(state) is not None
        if ok:
            whole.append(folder)
        else:
            log(f"removing incomplete checkpoint {folder} (interrupted while it was saved)")
            shutil.rmtree(folder, ignore_errors=True)
    return whole


class TrainProgress:
    """Whole-run training loss and time, kept in every checkpoint's trainer_state.json so a resume continues them.

    The Trainer's own ``training_loss`` and runtime cover only the steps of the current ``train()`` call; this
    records every loss the loss module returns (a forward hook) and the seconds spent. Its Trainer callback
    (:func:`progress_callback`) is a stateful one, so the Trainer saves it inside the file that marks a checkpoint
    whole.
    """

    NAME = "CompareTrainProgress"  # the callback's class name: its key in trainer_state.json "stateful_callbacks"

    def __init__(self, loss_sum: float = 0.0, loss_steps: int = 0, seconds: float = 0.0):
        self.loss_sum, self.loss_steps, self.seconds = float(loss_sum), int(loss_steps), float(seconds)
        self._t0: float | None = None

    @classmethod
    def from_state(cls, trainer_state: Fields) -> TrainProgress | None:
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

    def record(self, module, inputs, output) -> None:  # called by a forward hook on the loss with the summed loss
        self.loss_sum += float(output)
        self.loss_steps += 1

    def start(self) -> None:
        self._t0 = time.perf_counter()

    def elapsed(self) -> float:
        return self.seconds + (time.perf_counter() - self._t0 if self._t0 is not None else 0.0)

    def attributes(self) -> dict[str, float]:
        return {"loss_sum": self.loss_sum, "loss_steps": self.loss_steps, "seconds": self.elapsed()}


def progress_callback(progress: TrainProgress):
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
            return {"args": {}, "attributes": progress.attributes()}

    return CompareTrainProgress()
