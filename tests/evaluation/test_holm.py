"""Several judged parts: Holm's step-down on the contradiction side, statements with their own verdicts, and the
one-sided bounds every comparison stores (so a stored result can be judged again without its per-item values)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from st_magnitude.evaluation.stats import compare_arms, one_sided_bounds
from st_magnitude.evaluation.verdicts import bounds_of, holm, judge, statement, verdict

DF = 500.0


def comparison(est: float, se: float = 1.0, name: str = "a") -> dict:
    """A stored comparison made before bounds were stored: a symmetric t interval from its SE and df."""
    half = sps.t.ppf(0.975, DF) * se
    ci = {"estimate": est, "low": est - half, "high": est + half, "confidence": 0.95, "method": "t (Satterthwaite)"}
    return {
        "metric": "m",
        "arm_a": name,
        "arm_b": "b",
        "diff": est,
        "ci": ci,
        "components": {"se": se, "df": DF},
        "describe": f"m: {name} − b = {est:+.4f}",
    }


def test_bounds_of_an_older_result_follow_from_its_se_and_df():
    c = comparison(0.3, se=0.1)
    assert bounds_of(c, 0.025) == pytest.approx((c["ci"]["low"], c["ci"]["high"]))
    lo, hi = bounds_of(c, 0.025 / 4)
    assert hi - 0.3 == pytest.approx(sps.t.ppf(1 - 0.025 / 4, DF) * 0.1)


def test_holm_keeps_a_lone_contradiction_that_one_more_part_makes_inconclusive():
    """Estimate −2.1 SE (claimed > 0): wholly below 0 at one-sided 0.025 (t ≈ 1.96), not at 0.0125 (t ≈ 2.25)."""
    weak = verdict(comparison(-2.1), expect="greater")
    assert weak["verdict"] == "contradicts"
    assert holm([weak])[0]["verdict"] == "contradicts"  # one part: no correction
    clean = verdict(comparison(5.0, name="c"), expect="greater")
    adjusted = holm([weak, clean])
    assert adjusted[0]["verdict"] == "inconclusive" and adjusted[0]["verdict_unadjusted"] == "contradicts"
    assert "Holm" in adjusted[0]["holm"] and adjusted[1]["verdict"] == "reproduces"


def test_holm_steps_down_after_a_strong_contradiction():
    """A strong contradiction is rejected at 0.025/2; the weak one is then tested at 0.025 and kept (Holm, not
    Bonferroni)."""
    weak = verdict(comparison(-2.1), expect="greater")
    strong = verdict(comparison(-6.0, name="s"), expect="greater")
    assert [p["verdict"] for p in holm([weak, strong])] == ["contradicts", "contradicts"]


def test_holm_leaves_reproduces_and_non_interval_parts_alone():
    ok = verdict(comparison(3.0), expect="greater")
    flag = {"verdict": "contradicts", "claim": "a count", "reason": "0/5 flagged"}
    out = holm([ok, flag])
    assert out[0]["verdict"] == "reproduces" and out[1] == flag


def test_statements_keep_their_own_verdicts():
    number = statement("the paper's number", "λ = 0.01 collapses", [verdict(comparison(-9.0), expect="less")])
    mechanism = statement(
        "its mechanism",
        "every λ collapses",
        [verdict(comparison(-9.0), expect="less"), verdict(comparison(8.0, name="x"), expect="less")],
    )
    out = judge([number, mechanism])
    assert [st["verdict"] for st in out["statements"]] == ["reproduces", "contradicts"]
    assert out["verdict"] == "the paper's number: reproduces; its mechanism: contradicts"
    assert len(out["parts"]) == 3 and "Holm" in mechanism["multiplicity"]
    assert judge([number])["verdict"] == "reproduces"
    with pytest.raises(ValueError, match="at least one"):
        judge([])


def test_compare_arms_stores_nested_one_sided_bounds():
    rng = np.random.default_rng(0)
    a = [rng.normal(0.2, 1, 80) for _ in range(4)]
    b = [rng.normal(0.0, 1, 80) for _ in range(4)]
    c = compare_arms(a, b, n_boot=50).to_dict()
    bounds = c["one_sided_bounds"]
    assert len(bounds) == 10 and bounds[0]["alpha"] == pytest.approx(0.025)
    assert (bounds[0]["low"], bounds[0]["high"]) == pytest.approx((c["ci"]["low"], c["ci"]["high"]))
    lows, highs = [x["low"] for x in bounds], [x["high"] for x in bounds]
    assert lows == sorted(lows, reverse=True) and highs == sorted(highs)  # wider at smaller levels
    assert bounds_of(c, 0.025 / 3) == (bounds[2]["low"], bounds[2]["high"])
    with pytest.raises(ValueError, match="no interval at one-sided level"):
        bounds_of(c, 0.001)
    ci, extra = one_sided_bounds(np.stack(a) - np.stack(b), holm_parts=2)
    assert len(extra) == 2 and ci.low == pytest.approx(extra[0]["low"])
