"""Gates a run must pass before its verdict rule is applied.

A claim compares trained arms. When the training budget was too small to train anything, every comparison is a
comparison of noise, and a "contradicts" would blame the paper for the budget. So, before anything is judged:

- **the reference arm beats the untrained base** (:func:`beats_base`): a trained arm that the paper's effect is
  measured against (InfoNCE, cosine, ...) must be better than the untrained base on the judged data, with the whole
  95 % interval above 0;
- **training converged on a dev split** where the paper trains with early stopping (:func:`converged`): in every
  seed the dev score rose and peaked between the first trained evaluation and the last one (a peak at the first
  check is not resolved by the schedule), or plateaued at the end within a tolerance.

:func:`apply_gates` keeps the rule's verdict as ``ungated_verdict`` and replaces the verdict by
:data:`NOT_REACHED` when a gate fails — never "contradicts".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from st_magnitude.evaluation import verdicts
from st_magnitude.evaluation.stats import ArmComparison

__all__ = ["NOT_REACHED", "apply_gates", "beats_base", "converged", "judge_stored"]

#: the verdict of a run whose gates failed: the budget did not reach the regime the claim is about
NOT_REACHED = "not reached at this budget"


def beats_base(comparison: ArmComparison, *, lower_is_better: bool = False) -> dict[str, Any]:
    """Gate: the trained reference arm (``comparison.arm_a``) beats the untrained base (``arm_b``): the whole 95 %
    interval of ``a − b`` above 0 (below 0 when ``lower_is_better``, e.g. a loss)."""
    ci = comparison.ci
    passed = ci.high < 0 if lower_is_better else ci.low > 0
    side = "below" if lower_is_better else "above"
    return {
        "gate": f"{comparison.arm_a} beats the untrained {comparison.arm_b} ({comparison.metric}; whole CI {side} 0)",
        "passed": bool(passed),
        "reason": comparison.describe(),
    }


def converged(histories: Sequence[Sequence[dict[str, float]]], *, key: str, tol: float, arm: str) -> dict[str, Any]:
    """Gate: in every seed, the dev score ``key`` (higher is better) of ``arm`` rose and then stopped improving, at a
    point the dev schedule resolves.

    ``histories``: per seed, the dev evaluations in order (``[{"step": s, key: v}, ...]``), the first one before
    training (step 0). A seed converged when its best score is

    * after the first trained evaluation and before the last one (early stopping saw the rise and the fall), or
    * the last of at least three evaluations, improving on the one before by at most ``tol`` (a plateau).

    A best score *at* the first trained evaluation does not count: the schedule cannot tell where between step 0 and
    that check the score peaked, nor a peak from a collapse right after it (evaluate earlier and more often). A best
    score at step 0 (training never beat the start) does not count either.
    """
    if tol < 0:
        raise ValueError(f"tol must be >= 0, got {tol}")
    done, unresolved, no_gain = [], 0, 0
    for rows in histories:
        values = [float(r[key]) for r in rows]
        if len(values) < 2:
            done.append(False)
            continue
        best = max(range(len(values)), key=values.__getitem__)
        unresolved += best == 1
        no_gain += best == 0
        peak = 1 < best < len(values) - 1
        plateau = best == len(values) - 1 and len(values) >= 3 and values[-1] - values[-2] <= tol
        done.append(peak or plateau)
    reason = f"converged in {sum(done)}/{len(done)} seeds"
    if unresolved:
        reason += f"; best at the first dev check after step 0 in {unresolved} (the schedule misses the peak)"
    if no_gain:
        reason += f"; never above the step-0 dev score in {no_gain}"
    return {
        "gate": f"{arm} converged on the dev split ({key} rose, then stopped improving by more than {tol:g})",
        "passed": bool(done) and all(done),
        "reason": reason,
    }


def apply_gates(decision: dict[str, Any], gates: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Record ``gates`` in ``decision``; when one failed, the verdict becomes :data:`NOT_REACHED` (the rule's own
    verdict is kept as ``ungated_verdict``)."""
    decision["gates"] = list(gates)
    failed = [g for g in gates if not g["passed"]]
    if failed:
        decision["ungated_verdict"] = decision["verdict"]
        decision["verdict"] = NOT_REACHED
        for st in decision.get("statements", []):
            st["ungated_verdict"], st["verdict"] = st["verdict"], NOT_REACHED
        decision["gate_note"] = "gate failed, nothing judged: " + "; ".join(
            f"{g['gate']} ({g['reason']})" for g in failed
        )
    return decision


def judge_stored(decision: dict[str, Any], name: str, tests: str) -> dict[str, Any]:
    """One statement, ``name`` (testing ``tests``), from the judged parts a decision stores: the default
    :attr:`~st_magnitude.lab.replication.claim.Claim.judge` (Holm over its interval parts)."""
    parts = [{k: v for k, v in p.items() if k not in ("holm",)} for p in decision.get("parts", [])]
    for p in parts:  # judged again from each part's own verdict at 0.025, not from an earlier adjustment
        p["verdict"] = p.pop("verdict_unadjusted", p["verdict"])
    return verdicts.judge([verdicts.statement(name, tests, parts)])
