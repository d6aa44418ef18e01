"""Paper-claim replication: ``st-magnitude replicate CLAIM`` runs a claim's protocol over seeds, compares arms with
paired bootstrap and seed t-intervals (:mod:`.stats`), and writes a result JSON that ``docs/replication.md`` is
generated from (:mod:`.report`)."""

from __future__ import annotations

from st_magnitude._lazy import lazy_exports

__all__ = [
    "ArmComparison",
    "Interval",
    "combine_verdicts",
    "compare_arms",
    "paired_bootstrap",
    "paired_bootstrap_fn",
    "seed_interval",
    "verdict",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "st_magnitude.evaluation.stats": (
            "ArmComparison",
            "Interval",
            "combine_verdicts",
            "compare_arms",
            "paired_bootstrap",
            "paired_bootstrap_fn",
            "seed_interval",
            "verdict",
        ),
    },
)
