"""What a claim module declares: the paper's statement and number, a protocol per profile, the verdict rule (fixed
before running, or marked as revised), the setting differences, and two functions — ``run_seed`` (train and evaluate
every arm for one seed) and ``decide`` (turn all seeds into comparisons and a verdict with
:mod:`st_magnitude.evaluation.stats`). A verdict names what it tests: a claim may judge several statements (the
paper's number, its mechanism), each with its own verdict."""

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
    #: per profile, one line: what a run of it can establish and what it cannot
    can_establish: dict[str, str] = field(default_factory=dict)
    #: settings that shrink any profile to a few seconds on CPU (``--dry-run``): same code path, tiny sizes
    dry_run: dict[str, Any] = field(default_factory=dict)
    #: what of the verdict rule was changed after a run was seen, when and why ("" for a rule fixed before running)
    revised: str = ""
    #: decide's last step, ``judge(decision, settings) -> {"verdict", "statements", "parts"}``: the judged
    #: statements from what the decision stores (comparisons with their intervals, fits), so a committed summary,
    #: which holds no per-item values, can be judged again under a revised rule; None: the stored parts form one
    #: statement (:func:`st_magnitude.lab.replication.gates.judge_stored`)
    judge: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        for p in self.profiles:
            if p not in PROFILES:
                raise ValueError(f"claim {self.id}: unknown profile {p!r}; valid: {', '.join(PROFILES)}")
        for k in self.dry_run:
            if not any(k in settings for settings in self.profiles.values()):
                raise ValueError(f"claim {self.id}: dry-run setting {k!r} is in no profile")

    def settings(self, profile: str, dry_run: bool = False) -> dict[str, Any]:
        """The profile's settings; ``dry_run``: with :attr:`dry_run`'s tiny sizes over those it has."""
        if profile not in self.profiles:
            raise ValueError(f"claim {self.id} has no {profile!r} profile; valid: {', '.join(self.profiles)}")
        out = dict(self.profiles[profile])
        if dry_run:
            out.update({k: v for k, v in self.dry_run.items() if k in out})
        return out
