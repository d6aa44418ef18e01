"""Verdicts on multi-seed comparisons (:mod:`st_magnitude.evaluation.stats`): a claim about ``diff = a − b``, fixed
before running, judged ``reproduces`` / ``contradicts`` / ``inconclusive`` from the comparison's interval
(:func:`verdict`); Holm's step-down over a statement's parts (:func:`holm`); parts joined into statements and a
claim's decision (:func:`combine_verdicts`, :func:`statement`, :func:`judge`). Used by ``st-magnitude replicate``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from st_magnitude.evaluation.stats import HOLM_MAX_PARTS, ArmComparison

__all__ = ["VERDICTS", "bounds_of", "combine_verdicts", "holm", "judge", "statement", "verdict"]

VERDICTS = ("reproduces", "contradicts", "inconclusive")


def verdict(comparison: ArmComparison | dict, *, expect: str = "greater", threshold: float = 0.0) -> dict:
    """The verdict on a claim about ``diff = a − b``, fixed before running.

    ``expect="greater"``: the claim is ``diff > threshold`` (``threshold=0``: a is better; a negative threshold
    is a non-inferiority margin, e.g. ``−0.02`` for "at least as good, within 0.02"; a positive one a minimum
    effect size). ``expect="less"``: the claim is ``diff < threshold``. ``comparison``: an :class:`ArmComparison`
    or its ``to_dict()`` (a stored result, re-judged without its per-item values).

    - ``reproduces``: the whole 95 % interval lies on the claimed side of ``threshold``;
    - ``contradicts``: the whole interval lies on the other side;
    - ``inconclusive``: the interval contains ``threshold``.
    """
    if expect not in ("greater", "less"):
        raise ValueError(f"expect must be 'greater' or 'less', got {expect!r}")
    c = comparison.to_dict() if isinstance(comparison, ArmComparison) else comparison
    lo, hi = c["ci"]["low"], c["ci"]["high"]
    if expect == "greater":
        ok, bad, sign = lo > threshold, hi < threshold, ">"
    else:
        ok, bad, sign = hi < threshold, lo > threshold, "<"
    label = "reproduces" if ok else "contradicts" if bad else "inconclusive"
    claim = f"{c['metric']}: {c['arm_a']} − {c['arm_b']} {sign} {threshold:+g}"
    return {
        "verdict": label,
        "claim": claim,
        "expect": expect,
        "threshold": float(threshold),
        "reason": f"{c['describe']}; claim {claim} → {label}",
        "comparison": c,
    }


def combine_verdicts(parts: Sequence[dict]) -> dict:
    """All parts reproduce → ``reproduces``; any part contradicts → ``contradicts``; else ``inconclusive``."""
    if not parts:
        raise ValueError("combine_verdicts needs at least one verdict")
    labels = [p["verdict"] for p in parts]
    bad = [lab for lab in labels if lab not in VERDICTS]
    if bad:
        raise ValueError(f"unknown verdict {bad[0]!r}; valid: {', '.join(VERDICTS)}")
    if all(lab == "reproduces" for lab in labels):
        label = "reproduces"
    elif any(lab == "contradicts" for lab in labels):
        label = "contradicts"
    else:
        label = "inconclusive"
    return {"verdict": label, "parts": list(parts)}


def bounds_of(comparison: dict, alpha: float) -> tuple[float, float]:
    """The ends of a comparison's (``ArmComparison.to_dict()``) interval at the one-sided level ``alpha``: the stored
    :func:`one_sided_bounds`; for a result made before they were stored, from its symmetric t interval
    (estimate ± t_ν(1 − alpha) · SE from the stored components — exactly how that interval was built)."""
    from scipy import stats

    for b in comparison.get("one_sided_bounds") or []:
        if math.isclose(b["alpha"], alpha, rel_tol=1e-9):
            return float(b["low"]), float(b["high"])
    vc, ci = comparison.get("components"), comparison["ci"]
    if vc and "bootstrap-t" not in ci["method"]:
        est = float(ci["estimate"])
        if vc["se"] == 0:
            return est, est
        half = float(stats.t.ppf(1 - alpha, vc["df"])) * vc["se"]
        return est - half, est + half
    what = f"{comparison.get('metric')}: {comparison.get('arm_a')} − {comparison.get('arm_b')}"
    raise ValueError(
        f"{what}: no interval at one-sided level {alpha:g} is stored (levels 0.025/j, j ≤ "
        f"{HOLM_MAX_PARTS}); recompute it from the per-item values"
    )


def _wrong_side(part: dict, alpha: float) -> bool:
    low, high = bounds_of(part["comparison"], alpha)
    return high < part["threshold"] if part["expect"] == "greater" else low > part["threshold"]


def holm(parts: Sequence[dict], *, alpha: float = 0.025) -> list[dict]:
    """Holm's step-down (Holm 1979, Scand. J. Statist. 6, 65–70) over the "contradicts" side of the judged interval
    parts (:func:`verdict` dicts): with ``r`` parts not yet rejected, every one whose interval at the one-sided level
    ``alpha / r`` lies wholly on the wrong side of its threshold contradicts; repeat until none does. A part that
    contradicts at ``alpha`` alone but not after the step-down becomes "inconclusive" (``verdict_unadjusted``
    keeps its own). "Reproduces" is not adjusted: a statement reproduces only when every part does (an
    intersection–union test, level ``alpha`` without correction). Parts without an interval are returned as they
    are. Returns adjusted copies."""
    out = [dict(p) for p in parts]
    remaining = [i for i, p in enumerate(parts) if "comparison" in p]
    m = len(remaining)
    if m > HOLM_MAX_PARTS:
        raise ValueError(f"holm supports up to {HOLM_MAX_PARTS} interval parts, got {m}")
    rejected: set[int] = set()
    while remaining:
        hits = [i for i in remaining if _wrong_side(parts[i], alpha / len(remaining))]
        if not hits:
            break
        rejected.update(hits)
        remaining = [i for i in remaining if i not in hits]
    for i, p in enumerate(parts):
        if "comparison" not in p:
            continue
        out[i]["verdict_unadjusted"] = p.get("verdict_unadjusted", p["verdict"])
        if out[i]["verdict_unadjusted"] == "contradicts" and i not in rejected:
            out[i]["verdict"] = "inconclusive"
            out[i]["holm"] = f"contradicts at one-sided {alpha:g} alone, not after Holm over {m} parts"
    return out


def statement(name: str, tests: str, parts: Sequence[dict], *, multiplicity: str | None = None) -> dict:
    """One judged statement of a claim (e.g. "the paper's number", "its mechanism"): its parts after :func:`holm`,
    combined by :func:`combine_verdicts`. ``tests``: what it tests, in words; ``multiplicity``: the rule's note on
    multiple parts (default: Holm's, when there are several interval parts)."""
    adjusted = holm(parts)
    n = sum("comparison" in p for p in parts)
    if multiplicity is None:
        multiplicity = (
            f"Holm over its {n} interval parts (a part contradicts only at one-sided 0.025/r); reproduces needs "
            "every part at 0.025"
            if n > 1
            else "one interval part: no correction"
            if n == 1
            else "no interval part"
        )
    combined = combine_verdicts(adjusted) if adjusted else {"verdict": "inconclusive"}
    return {
        "name": name,
        "tests": tests,
        "verdict": combined["verdict"],
        "parts": adjusted,
        "multiplicity": multiplicity,
    }


def judge(statements: Sequence[dict]) -> dict:
    """A claim's decision from its :func:`statement` s: each keeps its own verdict; ``verdict`` is theirs when
    they agree, else ``"<name>: <verdict>; ..."``; ``parts`` lists every statement's parts (the page's tables)."""
    if not statements:
        raise ValueError("judge needs at least one statement")
    labels = {st["verdict"] for st in statements}
    overall = labels.pop() if len(labels) == 1 else "; ".join(f"{st['name']}: {st['verdict']}" for st in statements)
    parts = [p for st in statements for p in st["parts"]]
    return {"verdict": overall, "statements": list(statements), "parts": parts}
