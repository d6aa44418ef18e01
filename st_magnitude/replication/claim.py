"""What a claim module declares: the paper's statement and number, a protocol per profile, the verdict rule (fixed
before running), the setting differences, and two functions — ``run_seed`` (train and evaluate every arm for one
seed) and ``decide`` (turn all seeds into comparisons and a verdict with :mod:`st_magnitude.evaluation.stats`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Claim", "PROFILES"]

PROFILES = ("cpu", "gpu")


@dataclass
class Claim:
    id: str
    paper: str
    title: str
    statement: str
    paper_number: str
    verdict_rule: str
    profiles: dict[str, dict[str, Any]]
    differences: dict[str, list[str]]
    run_seed: Callable[..., dict[str, Any]]
    decide: Callable[[list[dict[str, Any]], dict[str, Any]], dict[str, Any]]
    #: an estimate per profile, never shown: the page and ``replicate --list`` show the recorded cost of a run
    budget: dict[str, str] = field(default_factory=dict)
    headline_metric: str = ""

    def __post_init__(self) -> None:
        for p in self.profiles:
            if p not in PROFILES:
                raise ValueError(f"claim {self.id}: unknown profile {p!r}; valid: {', '.join(PROFILES)}")

    def settings(self, profile: str) -> dict[str, Any]:
        if profile not in self.profiles:
            raise ValueError(f"claim {self.id} has no {profile!r} profile; valid: {', '.join(self.profiles)}")
        return dict(self.profiles[profile])
