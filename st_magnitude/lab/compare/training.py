"""Training one run of the comparison: pairs, loss, Trainer arguments, resumable checkpoints, progress."""

from __future__ import annotations

import logging
import shutil
import warnings
from pathlib import Path
from typing import Any

from st_magnitude._trust import Fields, read_json
from st_magnitude._trust.write import write_json_atomic
from st_magnitude.lab.compare.config import CompareConfig
from st_magnitude.lab.engine import dist as _dist
from st_magnitude.lab.engine.models import load_base_model
from st_magnitude.lab.engine.training import (
    CHECKPOINT_STATE,
    TrainProgress,
    TrainSpec,
    progress_callback,
    train,
    trainer_arguments,
    whole_checkpoints,
)
from st_magnitude.lab.engine.write_failure import checkpoint_write_failure, model_save_failure
from st_magnitude.losses._registry import compare_spec

logger = logging.getLogger(__name__)

__all__ = ["build_loss", "train_run", "train_spec", "trained_info", "training_arguments"]


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


#: The learnable similarity's role parameters carried by the model (γ̂ of queries and documents).
ROLE_PARAMETERS = r"gamma_(query|document)_logit"


def training_arguments(config: CompareConfig, variant: str, ckpt_dir: Path, device: str):
    """The Trainer settings of one run (the profile's optimizer and schedule; see ``PROFILES``)."""
    return trainer_arguments(train_spec(config, variant, ckpt_dir, device))


def train_spec(config: CompareConfig, variant: str, ckpt_dir: Path, device: str) -> TrainSpec:
    """One run's :class:`~st_magnitude.lab.engine.training.TrainSpec`: the profile's optimizer and schedule,
    checkpoints every ``save_steps`` (resumable), one learning rate for the learnable γ̂ when the profile sets one."""
    gamma_lr = config.gamma_learning_rate
    return TrainSpec(
        output_dir=str(ckpt_dir),
        steps=config.steps,
        # under torchrun the sampler draws the 1-process global batch of --batch-size rows (same seed, same rows)
        # and accelerate splits it, batch_size / world_size rows per process (see docs/compare.md)
        batch_size=config.batch_size,
        distributed=_dist.distributed(),
        device=device,
        learning_rate=config.learning_rate,
        lr_scheduler=config.lr_scheduler,
        warmup_steps=max(1, round(config.steps * config.warmup_fraction)) if config.warmup_fraction > 0 else 0,
        weight_decay=config.weight_decay,
        adam_beta2=config.adam_beta2,
        seed=config.seed,
        router_mapping={"anchor": "query", "positive": "document"},
        # quick: γ̂ gets its own learning rate (at encoder LRs it barely moves); full: as the paper
        learning_rate_mapping={ROLE_PARAMETERS: gamma_lr} if variant == "learnable" and gamma_lr else {},
        save_steps=config.save_steps or max(10, config.steps // 5),
        progress_bar=True,
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
    from st_magnitude.model.convert import apply_similarity

    model, _, _ = load_base_model(base_path, device, config.max_seq_length, config.trust_remote_code)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        apply_similarity(model, variant, warn_on_strip=False)  # compare's own choice: its report shows the norms
    loss = build_loss(model, variant, loss_name, config)
    n = config.steps * config.batch_size
    data = {"anchor": pairs["anchor"][: n * 2], "positive": pairs["positive"][: n * 2]}
    ckpt_dir = run_dir / "checkpoints"

    def pick_checkpoint() -> Path | None:  # rank 0 tidies the folder and decides for every process
        checkpoints = whole_checkpoints(ckpt_dir)
        for older in checkpoints[:-1]:
            shutil.rmtree(older, ignore_errors=True)  # resuming needs the last one only
        return checkpoints[-1] if checkpoints else None

    resume_from = _dist.rank0_decides(pick_checkpoint)
    spec = train_spec(config, variant, ckpt_dir, device)
    progress = TrainProgress()
    if resume_from is not None:
        state_file = resume_from / CHECKPOINT_STATE
        progress = TrainProgress.from_state(Fields(read_json(state_file), state_file))
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

    callbacks = [progress_callback(progress), LossStateCallback(loss, on_missing="warn")]
    try:
        train(model, loss, data, spec, callbacks=callbacks, resume_from=resume_from)
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
