"""The comparison's settings (profiles, CompareConfig, its fingerprint) and their validation."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from st_magnitude._similarity_names import similarity_names, validate_similarity_name  # torch-free
from st_magnitude.losses._registry import compare_config_fields, compare_loss_names  # torch-free

logger = logging.getLogger(__name__)

__all__ = ["CompareConfig", "PROFILES", "LOSSES", "validate"]


DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_VARIANTS = similarity_names(carriable=True)  # every similarity a model can carry
LOSSES = compare_loss_names()  # the losses of the registry that name a compare loss
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
    "one seed (42) instead of three (0, 42, 1337); --seeds 5 runs seeds 42 to 46",
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
            *compare_config_fields(),  # the loss hyper-parameters (scale, mw_temperature), from the loss registry
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


def _check_writable(output_dir: Path) -> None:
    from st_magnitude._trust.outputs import check_output_dir

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
