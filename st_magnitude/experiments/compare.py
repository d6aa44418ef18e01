"""``st-magnitude compare``: fine-tune one base model with several similarity variants and compare them.

Every run starts from the same base model, seed, steps and training pairs; each is evaluated with its *own*
similarity (the model carries it, :func:`st_magnitude.apply_similarity`) on in-domain and out-of-domain BEIR
datasets: nDCG@10, Recall@100, MRR@10 (pytrec_eval through BEIR), pooled ROC-AUC (paper 001 §5.1) and the per-query
AUC control. The κ recommender (paper 000 §4.5) runs on the base model first and the report says whether its pick
(qnorm or dnorm) won.

Layout of the output folder (re-running skips finished runs; an interrupted run resumes from its last whole
Trainer checkpoint, or re-evaluates a trained model; datasets added with ``--eval-data`` are evaluated on re-run)::

    OUT/.lock                  held while a process works here (pid, host, start time); a second run refuses
    OUT/config.json            the resolved configuration (a re-run that would train differently is refused)
    OUT/kappa.json             κ recommendation on the base model, with the settings that produced it
    OUT/runs/<variant>-<loss>/checkpoints/    the last whole Trainer checkpoint (removed once the model is saved)
    OUT/runs/<variant>-<loss>/train.json      whole-run train_loss / train_seconds (written before ".complete")
    OUT/runs/<variant>-<loss>/model/          the trained model (".complete", written last, marks a finished run)
    OUT/runs/<variant>-<loss>/metrics.json    metrics per evaluation dataset, with the settings of each evaluation
    OUT/results.csv, OUT/results.md, OUT/plots/*.png
"""

from __future__ import annotations

import csv
import dataclasses
import json
import logging
import random
import shutil
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from st_magnitude._files import write_json_atomic
from st_magnitude._similarity_names import similarity_names, validate_similarity_name  # torch-free
from st_magnitude.experiments import _dist
from st_magnitude.experiments.lock import OutputLock
from st_magnitude.integrations.data_home import resolve_data_dir, resolve_dataset  # the one data setting (stdlib only)

logger = logging.getLogger(__name__)

__all__ = ["CompareConfig", "PROFILES", "LOSSES", "run_compare"]

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_VARIANTS = similarity_names(carriable=True)  # every similarity a model can carry
LOSSES = ("infonce", "mw", "l2dir")
#: Key of the per-query nDCG@10 (``{query id: score}``) in each dataset's metrics in ``metrics.json``.
PER_QUERY_KEY = "per_query_ndcg@10"
LR_SCHEDULERS = ("linear", "cosine")

#: Profiles. ``quick`` finishes on 2 CPU cores in about 10–15 minutes (our settings: linear schedule with 10 %
#: warm-up, γ̂ at its own learning rate 1e-2 so that it moves in 20 steps). ``full`` follows paper 000 App. B
#: (Table 8: InfoNCE at scale 20 with in-batch negatives, lr 5e-6, no warm-up, cosine decay, weight decay 0.01,
#: max grad norm 1.0, AdamW β = (0.9, 0.98), ε = 1e-8, γ̂ trained with the encoder's optimizer settings) as far as one
#: machine allows; where it cannot (steps, batch, data, seeds, checkpoint selection) see ``FULL_PROFILE_DEVIATIONS``.
_PROFILE_TABLE: tuple[tuple[str, Any, Any], ...] = (
    # (setting, quick, full)
    ("steps", 20, 1000),
    ("batch_size", 16, 128),  # full: paper 000 §3.1 / Table 8, 128 per device (256 over its 2 GPUs)
    ("max_seq_length", 128, 256),
    ("max_corpus", 300, None),
    ("max_queries", 30, None),
    ("kappa_pairs", None, None),  # None: 8n from the model's embedding dim (3072 for MiniLM), the κ rule's minimum
    ("kappa_bootstrap", 100, 200),
    ("learning_rate", 5e-5, 5e-6),
    ("lr_scheduler", "linear", "cosine"),
    ("warmup_fraction", 0.1, 0.0),
    ("weight_decay", 0.0, 0.01),
    ("adam_beta2", 0.999, 0.98),
    ("gamma_learning_rate", 1e-2, None),  # full: None, γ̂ trains with the encoder's learning rate
)
PROFILES: dict[str, dict[str, Any]] = {
    profile: {row[0]: row[column] for row in _PROFILE_TABLE} for column, profile in enumerate(("quick", "full"), 1)
}

#: Where ``--full`` departs from paper 000 App. B (Table 8), and why; printed by ``--help`` and docs/compare.md.
FULL_PROFILE_DEVIATIONS = (
    "1,000 steps instead of 100 epochs (~32,000 steps) and no best-checkpoint selection on a validation split "
    "(the final model is evaluated)",
    "batch 128 (127 in-batch negatives); the paper's effective batch is 256 over 2 GPUs: "
    "`torchrun --nproc_per_node 2 -m st_magnitude.cli compare --full --batch-size 256` trains with that global batch, "
    "negatives gathered across the processes",
    "trains on --train-data (default NFCorpus train) instead of MS MARCO v1.1 QA (81,795 pairs)",
    "one seed (42) instead of three (0, 42, 1337); --seeds 3 runs seeds 42, 43 and 44",
    "lr 5e-6 is the paper's choice for RetroMAE/E5/Qwen (2e-6 for Contriever), found by a grid search on those "
    "models; it was not searched for the base model used here",
    "max_seq_length 256 and the κ step's sizes are ours (the paper does not state them)",
)


@dataclass
class CompareConfig:
    model: str = DEFAULT_MODEL
    variants: tuple[str, ...] = DEFAULT_VARIANTS
    losses: tuple[str, ...] = ("infonce",)
    train_data: str = "nfcorpus"
    eval_data: tuple[str, ...] = ("nfcorpus", "scifact")
    data_dir: str | None = None
    output_dir: str = "runs/compare"
    profile: str = "quick"
    steps: int = 20
    batch_size: int = 16
    max_seq_length: int = 128
    learning_rate: float = 5e-5
    lr_scheduler: str = "linear"
    warmup_fraction: float = 0.1
    weight_decay: float = 0.0
    adam_beta2: float = 0.999
    gamma_learning_rate: float | None = 1e-2  # None: γ̂ trains with the encoder's learning rate
    save_steps: int | None = None  # checkpoint interval (None: max(10, steps // 5)); does not change results
    max_corpus: int | None = 300
    max_queries: int | None = 30
    kappa_pairs: int | None = None  # None: 8n (diagnostics.fim.kappa_min_pairs)
    kappa_bootstrap: int = 100
    seed: int = 42
    eval_seed: int | None = None  # seed of the evaluation subsample (None: ``seed``); --seeds fixes it across seeds
    scale: float = 20.0
    mw_temperature: float = 0.01
    device: str | None = None
    kappa: bool = True
    trust_remote_code: bool = False  # for the base model only; not part of the fingerprint
    extra: dict[str, Any] = field(default_factory=dict)

    def fingerprint(self) -> dict[str, Any]:
        """What must match for trained models in the folder to be reused (a mismatch is refused).

        What only selects or evaluates runs is keyed where it is used instead, so changing it re-does exactly the
        affected part: each run's metrics.json records, per dataset, what it was evaluated on (``eval_key``);
        kappa.json records its pair count and resamples; ``variants`` / ``losses`` pick the runs of the table.
        """
        keys = (
            "model",
            "train_data",
            "steps",
            "batch_size",
            "max_seq_length",
            "learning_rate",
            "lr_scheduler",
            "warmup_fraction",
            "weight_decay",
            "adam_beta2",
            "gamma_learning_rate",
            "seed",
            "scale",
            "mw_temperature",
        )
        return {k: getattr(self, k) for k in keys}

    def eval_key(self, folder: Path) -> dict[str, Any]:
        """What one dataset's metrics depend on besides the trained model."""
        return {
            "folder": str(Path(folder).resolve()),
            "max_corpus": self.max_corpus,
            "max_queries": self.max_queries,
            "seed": self.subsample_seed,
        }

    @property
    def subsample_seed(self) -> int:
        """Seed of the NanoBEIR-style evaluation subsample."""
        return self.seed if self.eval_seed is None else self.eval_seed

    def kappa_key(self) -> dict[str, Any]:
        """What kappa.json depends on besides the base model and training data (both in the fingerprint)."""
        return {"pairs": self.kappa_pairs, "bootstrap": self.kappa_bootstrap, "seed": self.seed}


#: Values of training settings that folders written before they were recorded were trained with.
_LEGACY_FINGERPRINT = dict(
    lr_scheduler="linear", warmup_fraction=0.1, weight_decay=0.0, adam_beta2=0.999, gamma_learning_rate=1e-2
)


# ----------------------------------------------------------------------------------------------------------------
# resolution and validation (nothing is written before all of this passed)
# ----------------------------------------------------------------------------------------------------------------
def load_base_model(name: str, device: str, max_seq_length: int, trust_remote_code: bool = False):
    """``(model, description, source)`` of the base model, loaded by :func:`~st_magnitude.integrations.load_model`.

    That loader refuses code outside sentence-transformers and st-magnitude unless ``trust_remote_code=True`` (CLI
    ``--trust-remote-code``) and falls back to the offline all-MiniLM-L6-v2 wheel; ``source`` is what it loaded, so a
    run reloads the very same model.
    """
    from st_magnitude.integrations.models import load_model_and_source

    model, source, desc = load_model_and_source(
        name, device=device, max_seq_length=max_seq_length, trust_remote_code=trust_remote_code
    )
    return model, desc, source


def _check_writable(output_dir: Path) -> None:
    from st_magnitude._cli_args import check_output_dir

    check_output_dir(output_dir, "output folder")


def validate(config: CompareConfig) -> CompareConfig:
    config.variants = tuple(validate_similarity_name(v) for v in config.variants)
    carriable = similarity_names(carriable=True)
    for v in config.variants:
        if v not in carriable:
            raise ValueError(f"variant {v!r} cannot be carried by a model; use: {', '.join(carriable)}")
    bad = [loss for loss in config.losses if loss not in LOSSES]
    if bad:
        raise ValueError(f"unknown loss {bad[0]!r}; valid losses: {', '.join(LOSSES)}")
    if config.profile not in PROFILES:
        raise ValueError(f"unknown profile {config.profile!r}; valid: {', '.join(PROFILES)}")
    for label in ("steps", "batch_size", "max_seq_length"):
        if getattr(config, label) <= 0:
            raise ValueError(f"{label} must be positive, got {getattr(config, label)}")
    if config.batch_size < 2:
        raise ValueError("batch_size must be at least 2 (in-batch negatives)")
    if config.lr_scheduler not in LR_SCHEDULERS:
        raise ValueError(f"unknown lr_scheduler {config.lr_scheduler!r}; valid: {', '.join(LR_SCHEDULERS)}")
    checks = (
        ("learning_rate", config.learning_rate, config.learning_rate > 0),
        ("warmup_fraction", config.warmup_fraction, 0 <= config.warmup_fraction < 1),
        ("weight_decay", config.weight_decay, config.weight_decay >= 0),
        ("adam_beta2", config.adam_beta2, 0 < config.adam_beta2 < 1),
        ("gamma_learning_rate", config.gamma_learning_rate, (config.gamma_learning_rate or 1) > 0),
        ("save_steps", config.save_steps, (config.save_steps or 1) > 0),
    )
    for label, value, ok in checks:
        if not ok:
            raise ValueError(f"{label} out of range: {value}")
    return config


# ----------------------------------------------------------------------------------------------------------------
# training
# ----------------------------------------------------------------------------------------------------------------
def training_pairs(folder: Path, n: int, seed: int) -> dict[str, list[str]]:
    """n seeded (query, relevant document) pairs from the dataset's train split (dev/test if there is none)."""
    from st_magnitude.integrations.data import load_beir, positive_pairs

    split = next((s for s in ("train", "dev", "test") if (folder / "qrels" / f"{s}.tsv").is_file()), None)
    if split is None:
        raise FileNotFoundError(f"{folder} has no qrels to train on")
    pairs = positive_pairs(load_beir(folder, split, on_missing="drop"))
    rng = random.Random(seed)
    rng.shuffle(pairs)
    # one positive per query per batch is what the no-duplicates sampler enforces; keep the pool large enough
    pairs = pairs[: max(n * 3, n)]
    return {"anchor": [p[0] for p in pairs], "positive": [p[1] for p in pairs], "split": split}


def build_loss(model, variant: str, loss: str, config: CompareConfig):
    from st_magnitude import losses as L

    gather = _dist.distributed()  # under torchrun every process scores its rows against the global batch
    if loss == "infonce":
        return L.PartialNormInfoNCELoss(model, similarity=variant, scale=config.scale, gather_across_devices=gather)
    if loss == "mw":
        return L.MWLoss(model, similarity=variant, temperature=config.mw_temperature, gather_across_devices=gather)
    if loss == "l2dir":
        return L.L2DirLoss(model, gather_across_devices=gather)
    raise ValueError(f"unknown loss {loss!r}; valid losses: {', '.join(LOSSES)}")


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
        try:
            state = json.loads((folder / CHECKPOINT_STATE).read_text())
            ok = state.get("global_step") == step and _TrainProgress.from_state(state) is not None
        except (OSError, ValueError, AttributeError):
            ok = False
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
    def from_state(cls, trainer_state: dict) -> _TrainProgress | None:
        saved = (trainer_state.get("stateful_callbacks") or {}).get(cls.NAME)
        if not isinstance(saved, dict) or not isinstance(saved.get("attributes"), dict):
            return None
        return cls(**saved["attributes"])

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

    from st_magnitude.convert import apply_similarity

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
        progress = _TrainProgress.from_state(json.loads((resume_from / CHECKPOINT_STATE).read_text()))
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
    finally:
        hook.remove()
    info = {
        "train_loss": progress.loss_sum / max(progress.loss_steps, 1),
        "train_seconds": progress.elapsed(),
        "train_steps": progress.loss_steps,
        "resumed": resume_from is not None,
        "resumed_from_step": int(resume_from.name.removeprefix("checkpoint-")) if resume_from is not None else None,
    }
    from st_magnitude.convert import model_gammas

    g = model_gammas(model)
    if g is not None:
        info.update(gamma_query=g[0], gamma_document=g[1])
    model_dir = run_dir / "model"

    def finish() -> None:  # rank 0 writes; the others wait so nobody reads a half-written run
        if model_dir.exists():
            shutil.rmtree(model_dir)
        model.save(str(model_dir))
        write_json_atomic(run_dir / "train.json", info)
        (model_dir / ".complete").write_text("ok")
        shutil.rmtree(ckpt_dir, ignore_errors=True)

    _dist.rank0_only(finish)
    return info


def trained_info(run_dir: Path) -> dict[str, Any] | None:
    """train.json of a finished training (``model/.complete`` and a readable ``train.json``), else None."""
    if not (run_dir / "model" / ".complete").exists():
        return None
    try:
        return json.loads((run_dir / "train.json").read_text())
    except (OSError, ValueError):
        return None


# ----------------------------------------------------------------------------------------------------------------
# evaluation
# ----------------------------------------------------------------------------------------------------------------
@dataclass
class EvalSet:
    """One evaluation dataset of the comparison: its (possibly subsampled) test split, ids in sorted order."""

    name: str
    data: Any  # BEIRData, its dictionaries ordered by id

    @property
    def query_ids(self) -> list[str]:
        return list(self.data.queries)

    @property
    def doc_ids(self) -> list[str]:
        return list(self.data.corpus)


def load_eval_sets(folders: dict[str, Path], config: CompareConfig) -> list[EvalSet]:
    """Each folder's test split, NanoBEIR-style subsampled by the config, with queries, corpus and qrels ordered by
    id (so equal scores rank the same whatever the order of the files)."""
    from st_magnitude.integrations.data import load_beir, subsample

    sets = []
    for name, folder in folders.items():
        data = load_beir(folder, "test", on_missing="drop")
        if config.max_corpus or config.max_queries:
            data = subsample(
                data, max_corpus=config.max_corpus, max_queries=config.max_queries, seed=config.subsample_seed
            )
        data = dataclasses.replace(
            data,
            queries={q: data.queries[q] for q in sorted(data.queries)},
            corpus={d: data.corpus[d] for d in sorted(data.corpus)},
            qrels={q: data.qrels[q] for q in sorted(data.qrels)},
        )
        sets.append(EvalSet(name, data))
    return sets


def evaluate_sets(model, eval_sets: list[EvalSet], batch_size: int = 64) -> tuple[dict[str, dict], dict[str, dict]]:
    """``(metrics, norms)`` per dataset: :func:`st_magnitude.integrations.evaluate.evaluate_model` with the model's
    own similarity, plus what the comparison records — per-query nDCG@10 (``PER_QUERY_KEY``), the dual cosine/dot
    view of the raw embeddings and their norms (for the histograms)."""
    from st_magnitude.integrations.evaluate import evaluate_model

    metrics, norms = {}, {}
    for es in eval_sets:
        row = evaluate_model(
            model,
            es.data,
            batch_size=batch_size,
            show_progress_bar=True,
            per_query=True,
            raw_views=("cosine", "dot"),
            norms=True,
        )
        norms[es.name] = row.pop("norms")
        metrics[es.name] = {k: v for k, v in row.items() if k not in _ROW_INFO}
    return metrics, norms


#: What :func:`~st_magnitude.integrations.evaluate.evaluate_model`'s row says about the data, not a metric.
_ROW_INFO = ("dataset", "split", "queries", "corpus", "note", "scored_with", "seconds")


# ----------------------------------------------------------------------------------------------------------------
# the workflow
# ----------------------------------------------------------------------------------------------------------------
def run_compare(config: CompareConfig, log=print) -> dict[str, Any]:
    """Run (or resume) the comparison; returns ``{"rows": [...], "kappa": {...}, "output_dir": ...}``."""
    import torch

    validate(config)
    device = config.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if _dist.distributed():  # torchrun / accelerate launch: rank 0 writes and evaluates, all train (DDP)
        world = _dist.world_size()
        if config.batch_size % world:
            allowed = sorted({max(world, config.batch_size // world * world), -(-config.batch_size // world) * world})
            raise ValueError(
                f"--batch-size {config.batch_size} does not split evenly over {world} processes: use a multiple of "
                f"{world} (e.g. {' or '.join(map(str, allowed))}); it is the global batch, each process gets "
                "batch_size / world_size rows"
            )
        if device == "cuda":
            device = f"cuda:{_dist.local_rank()}"
        _dist.init(device)
        log = _dist.main_only(log)
    out = Path(config.output_dir)
    _check_writable(out)
    lock = _output_lock(out)
    # a second run into a busy folder stops here, before any slow preparation (rank 0 holds the lock: see below)
    _dist.rank0_decides(lambda: lock.check_free())
    data_dir = resolve_data_dir(config.data_dir)
    train_folder = resolve_dataset(config.train_data, data_dir, "train" if config.train_data else "test")
    eval_folders = {Path(n).name: resolve_dataset(n, data_dir, "test") for n in config.eval_data}
    if len(eval_folders) != len(config.eval_data):
        raise ValueError(f"two evaluation datasets share a folder name: {', '.join(config.eval_data)}")
    base_model, base_desc, base_path = load_base_model(
        config.model, device, config.max_seq_length, config.trust_remote_code
    )
    # the data is read (and validated) before anything is written: a bad corpus leaves no folder behind
    eval_sets = load_eval_sets(eval_folders, config)
    pairs = training_pairs(train_folder, config.steps * config.batch_size, config.seed)
    if len(pairs["anchor"]) < config.batch_size:
        raise ValueError(
            f"{train_folder} gives {len(pairs['anchor'])} training pairs, fewer than one batch ({config.batch_size})"
        )
    held = {"base_model": base_model if _dist.is_main() else None}  # freed once κ has run (on rank 0)
    del base_model

    # -- everything validated: start writing (one process per output folder; rank 0 of a distributed launch) ----
    _dist.rank0_decides(lambda: lock.acquire() and None)
    try:
        if lock is not None and lock.took_over:
            log(f"note: took over a stale lock left by pid {lock.took_over.get('pid')} (no longer running)")
        return _run_locked(
            config, out, device, held, base_desc, base_path, train_folder, eval_folders, eval_sets, pairs, log
        )
    finally:
        if lock is not None:
            lock.release()


def _output_lock(out: Path) -> OutputLock | None:
    """The folder lock, held by the first process of a distributed launch only (its peers share its work)."""
    return OutputLock(out) if _dist.is_main() else None


def _check_fingerprint(out: Path, config: CompareConfig) -> None:
    """Refuse a folder holding runs trained with other settings; a config.json without runs binds nothing."""
    cfg_path = out / "config.json"
    runs_dir = out / "runs"
    if not cfg_path.exists() or not (runs_dir.is_dir() and any(runs_dir.iterdir())):
        return
    previous = json.loads(cfg_path.read_text()).get("fingerprint")
    if not previous:
        return
    previous = {**_LEGACY_FINGERPRINT, **previous}
    current = json.loads(json.dumps(config.fingerprint()))
    changed = [f"{k} {previous.get(k)!r} there, {v!r} now" for k, v in current.items() if previous.get(k) != v]
    if changed:
        raise ValueError(
            f"{out} holds runs trained with other settings ({'; '.join(changed)}); use a new --output-dir, or the "
            "same settings to resume"
        )


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _run_locked(
    config: CompareConfig,
    out: Path,
    device: str,
    held: dict,
    base_desc: str,
    base_path: str,
    train_folder: Path,
    eval_folders: dict[str, Path],
    eval_sets: list[EvalSet],
    pairs: dict,
    log,
) -> dict[str, Any]:
    import torch

    cfg_path = out / "config.json"

    def write_config() -> None:
        _check_fingerprint(out, config)
        record = {"fingerprint": config.fingerprint(), "config": dataclasses.asdict(config), "base_model": base_desc}
        record.update(device=device, processes=_dist.world_size())
        write_json_atomic(cfg_path, record)

    _dist.rank0_decides(write_config)  # a refusal there stops every process
    log(f"output folder: {out}")
    log(f"base model: {base_desc} | device: {device} | profile: {config.profile}")

    for es in eval_sets:
        log(f"eval {es.name}: {es.data!r}")  # the repr carries the subsample note

    kappa_path = out / "kappa.json"
    eval_keys = {es.name: config.eval_key(eval_folders[es.name]) for es in eval_sets}
    base_json = out / "base.json"

    def evaluate_base(base_model) -> dict:
        """The untrained base model on the eval sets, the plots' reference (kept in base.json for resumed runs)."""
        record = _read_json(base_json)
        if record and record.get("eval") == json.loads(json.dumps(eval_keys)):
            return record
        log("untrained base model: evaluating it as the reference of the plots")
        metrics, norms = evaluate_sets(base_model, eval_sets)
        record = {"metrics": metrics, "norms": norms, "eval": eval_keys}
        write_json_atomic(base_json, record)
        return record

    def run_base_and_kappa_step() -> tuple[dict, dict | None]:  # rank 0 only: the base model is not trained
        base_model = held.pop("base_model")  # freed when this returns
        return evaluate_base(base_model), run_kappa_step(base_model)

    def run_kappa_step(base_model) -> dict | None:
        if not config.kappa:
            return None
        kappa = _read_json(kappa_path)
        if kappa and kappa.get("settings") == json.loads(json.dumps(config.kappa_key())):
            pass  # computed earlier with these settings
        else:
            from st_magnitude.diagnostics.report import run_kappa

            res, secs, source = run_kappa(
                base_model,
                [train_folder],
                n_pairs=config.kappa_pairs,
                n_bootstrap=config.kappa_bootstrap,
                seed=config.seed,
            )
            kappa = {
                "recommendation": res.recommendation,
                "confident": res.confident,
                "delta": res.delta,
                "ci": [res.ci_low, res.ci_high],
                "summary": res.summary(),
                "seconds": secs,
                "pairs": source,
                "settings": config.kappa_key(),
            }
            write_json_atomic(kappa_path, kappa)
        log(f"κ rule on the base model: {kappa['summary']}")
        return kappa

    base, kappa = _dist.rank0_decides(run_base_and_kappa_step)
    held.clear()

    runs = [(v, loss) for loss in config.losses for v in config.variants if not (loss == "l2dir" and v != "cosine")]
    if any(loss == "l2dir" for loss in config.losses) and any(v != "cosine" for v in config.variants):
        log("note: l2dir trains a cosine retriever (NAP head feeds InfoTN only); it runs once, as cosine-l2dir")
    rows, all_norms = [], {}
    from tqdm.auto import tqdm

    for variant, loss_name in tqdm(runs, desc="variants", unit="run", disable=not _dist.is_main()):
        run_id = f"{variant}-{loss_name}"
        run_dir = out / "runs" / run_id
        metrics_path = run_dir / "metrics.json"
        model_dir = run_dir / "model"

        def plan() -> tuple[list[str], bool]:
            """(datasets to evaluate, whether to train): rank 0 reads the run's files, every process follows."""
            record = _read_json(metrics_path)
            # datasets this run has no metrics for, or has metrics made on other data / subsampling settings
            todo = [
                es.name
                for es in eval_sets
                if record is None
                or es.name not in record.get("metrics", {})
                or record.get("eval", {}).get(es.name) != json.loads(json.dumps(eval_keys[es.name]))
            ]
            if not todo:
                log(f"[{run_id}] finished earlier: skipped")
                return todo, False
            run_dir.mkdir(parents=True, exist_ok=True)
            if trained_info(run_dir) is not None:
                log(f"[{run_id}] trained earlier: evaluating {', '.join(todo)}")
                shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)  # left by a kill after .complete
                return todo, False
            if (model_dir / ".complete").exists():
                log(f"[{run_id}] its training did not finish writing (no train.json): training again")
            log(f"[{run_id}] training {config.steps} steps × batch {config.batch_size}")
            return todo, True

        todo_names, train = _dist.rank0_decides(plan)
        if train:
            torch.manual_seed(config.seed)
            train_run(base_path, variant, loss_name, config, pairs, run_dir, device)

        def evaluate_and_record() -> dict:
            """Rank 0: evaluate what the plan named, write metrics.json and add the run's rows to the table."""
            record = None if train else _read_json(metrics_path)  # an earlier model's metrics do not describe this
            todo = [es for es in eval_sets if train or es.name in todo_names]
            if todo:
                from st_magnitude.integrations.models import load_model

                model = load_model(str(model_dir), device=device, max_seq_length=config.max_seq_length)
                t0 = time.perf_counter()
                metrics, norms = evaluate_sets(model, todo)
                previous = record or {}
                record = {
                    "variant": variant,
                    "loss": loss_name,
                    "train": trained_info(run_dir),
                    "metrics": {**previous.get("metrics", {}), **metrics},
                    "norms": {**previous.get("norms", {}), **norms},
                    "eval": {**previous.get("eval", {}), **{es.name: eval_keys[es.name] for es in todo}},
                    "eval_seconds": previous.get("eval_seconds", 0.0) + time.perf_counter() - t0,
                }
                write_json_atomic(metrics_path, record)
            # the table holds exactly the requested datasets (records may hold more from earlier invocations)
            all_norms[run_id] = {es.name: record["norms"][es.name] for es in eval_sets}
            for ds in (es.name for es in eval_sets):
                m = record["metrics"][ds]
                rows.append(
                    {
                        "run": run_id,
                        "variant": record["variant"],
                        "loss": record["loss"],
                        "dataset": ds,
                        **{k: round(v, 5) for k, v in m.items() if k != PER_QUERY_KEY},
                        "train_loss": round(record["train"]["train_loss"], 5),
                        "train_seconds": round(record["train"]["train_seconds"], 1),
                    }
                )
            return record

        _dist.rank0_only(evaluate_and_record)  # the other processes wait here

    def report() -> dict[str, Any]:  # rank 0 writes the table and plots; every process returns the same result
        summary = write_reports(out, rows, all_norms, kappa, config, eval_sets, base_desc, device, base=base)
        log(summary)
        log(f"results in {out}: results.md, results.csv, plots/, runs/<run>/")
        return {"rows": rows, "kappa": kappa, "output_dir": str(out), "summary": summary}

    return _dist.rank0_decides(report)


def kappa_verdict(rows: list[dict], kappa: dict | None) -> str:
    if not kappa:
        return ""
    score = {}
    for v in ("qnorm", "dnorm"):
        vals = [r["ndcg@10"] for r in rows if r["variant"] == v and r["loss"] == "infonce"]
        if vals:
            score[v] = sum(vals) / len(vals)
    if kappa["recommendation"] not in ("qnorm", "dnorm"):  # inconclusive: there is no pick to check
        means = ", ".join(f"{v} {s:.4f}" for v, s in score.items())
        return f"κ rule inconclusive ({kappa['summary']}); no pick to check" + (
            f" (mean nDCG@10 over eval datasets: {means})." if means else "."
        )
    if len(score) < 2:
        return f"κ picked {kappa['recommendation']} (qnorm and dnorm were not both trained, so no verdict)."
    winner = max(score, key=score.get)
    ok = "won" if winner == kappa["recommendation"] else "lost"
    conf = "confident" if kappa["confident"] else "not confident (CI contains 0)"
    return (
        f"κ picked {kappa['recommendation']} ({conf}); mean nDCG@10 over eval datasets: qnorm "
        f"{score['qnorm']:.4f}, dnorm {score['dnorm']:.4f} → the pick {ok}."
    )


def write_reports(
    out: Path,
    rows: list[dict],
    norms: dict,
    kappa: dict | None,
    config: CompareConfig,
    eval_sets: Sequence[EvalSet],
    base_desc: str,
    device: str,
    base: dict | None = None,
) -> str:
    from st_magnitude.experiments.plots import plot_bars, plot_norms

    cols = [
        "run",
        "dataset",
        "ndcg@10",
        "recall@100",
        "mrr@10",
        "pooled_auc",
        "per_query_auc",
        "ndcg@10_cosine_raw",
        "ndcg@10_dot_raw",
        "train_loss",
        "train_seconds",
    ]
    with open(out / "results.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    lines = [
        f"# st-magnitude compare ({config.profile} profile)",
        "",
        f"Base model: {base_desc}; device: {device}; train data: {config.train_data} "
        f"({config.steps} steps × batch {config.batch_size}, lr {config.learning_rate}, "
        f"max_seq_length {config.max_seq_length}, seed {config.seed}).",
        "",
    ]
    for es in eval_sets:
        lines.append(
            f"- {es.name}: {len(es.query_ids)} queries, {len(es.doc_ids)} documents"
            + (f" — {es.data.note}" if es.data.note else " (full test split)")
        )
    lines += [
        "",
        "| run | dataset | nDCG@10 | Recall@100 | MRR@10 | pooled AUC | per-query AUC |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['run']} | {r['dataset']} | {r['ndcg@10']:.4f} | {r['recall@100']:.4f} | "
            f"{r['mrr@10']:.4f} | {r['pooled_auc']:.4f} | {r['per_query_auc']:.4f} |"
        )
    lines += [
        "",
        f"One seed ({config.seed}): no confidence intervals, so no difference above is shown to exceed noise; "
        "`--seeds 3` repeats every run and reports 95% intervals (results_seeds.md).",
    ]
    if base:
        cells = [f"{ds} nDCG@10 {m['ndcg@10']:.4f}" for ds, m in base["metrics"].items()]
        lines += ["", f"Untrained base model ({base_desc}, the plots' dashed reference): {', '.join(cells)}."]
    verdict = kappa_verdict(rows, kappa)
    if kappa:
        lines += ["", f"κ rule (base model): {kappa['summary']}", "", verdict]
    plots = out / "plots"
    plots.mkdir(exist_ok=True)
    made = [
        plot_bars(rows, plots, reference=base["metrics"] if base else None),
        plot_norms(norms, plots, reference=base["norms"] if base else None),
    ]
    lines += ["", "Plots: " + ", ".join(str(Path(p).relative_to(out)) for group in made for p in group)]
    text = "\n".join(lines) + "\n"
    (out / "results.md").write_text(text)
    return text
