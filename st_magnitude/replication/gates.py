"""Gates a run must pass before its verdict rule is applied.

A claim compares trained arms. When the training budget was too small to train anything, every comparison is a
comparison of noise, and a "contradicts" would blame the paper for the budget. So, before anything is judged:

- **the reference arm beats the untrained base** (:func:`beats_base`): a trained arm that the paper's effect is
  measured against (InfoNCE, cosine, ...) must be better than the untrained base on the judged data, with the whole
  95 % interval above 0;
- **training converged on a dev split** where the paper trains with early stopping (:func:`converged`): in every
  seed the best dev score came before the last evaluation, or the last evaluations moved it by less than a tolerance.

:func:`apply_gates` keeps the rule's verdict as ``ungated_verdict`` and replaces the verdict by
:data:`NOT_REACHED` when a gate fails — never "contradicts".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from st_magnitude.evaluation.stats import ArmComparison

__all__ = ["NOT_REACHED", "apply_gates", "beats_base", "converged"]

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
    """Gate: in every seed, the dev score ``key`` (higher is better) of ``arm`` stopped improving.

    ``histories``: per seed, the dev evaluations in order (``[{"step": s, key: v}, ...]``). A seed converged when its
    best score came before its last evaluation (early stopping saw no further gain), or when the last evaluation
    improved on the one before by at most ``tol``.
    """
    if tol < 0:
        raise ValueError(f"tol must be >= 0, got {tol}")
    done = []
    for rows in histories:
        values = [float(r[key]) for r in rows]
        if len(values) < 2:
            done.append(False)
            continue
        best = max(range(len(values)), key=values.__getitem__)
        done.append(best < len(values) - 1 or values[-1] - values[-2] <= tol)
    return {
        "gate": f"{arm} converged on the dev split ({key} stopped improving by more than {tol:g})",
        "passed": bool(done) and all(done),
        "reason": f"converged in {sum(done)}/{len(done)} seeds",
    }


def apply_gates(decision: dict[str, Any], gates: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Record ``gates`` in ``decision``; when one failed, the verdict becomes :data:`NOT_REACHED` (the rule's own
    verdict is kept as ``ungated_verdict``)."""
    decision["gates"] = list(gates)
    failed = [g for g in gates if not g["passed"]]
    if failed:
        decision["ungated_verdict"] = decision["verdict"]
        decision["verdict"] = NOT_REACHED
        decision["gate_note"] = "gate failed, nothing judged: " + "; ".join(
            f"{g['gate']} ({g['reason']})" for g in failed
        )
    return decision
