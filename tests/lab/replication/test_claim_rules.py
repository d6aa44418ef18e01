"""Every claim's verdict rule and gates on synthetic results whose truth is fixed by construction.

- **A wrong claim cannot pass**: on data where the claim is false (identical arms, a shuffled control, a naive law)
  the rule gives anything but "reproduces".
- **The rule can pass**: on data where the claim holds, it reproduces (so the first check is not vacuous).
- **Gates**: when the trained reference arm does not beat the untrained base (or did not converge on dev), the verdict
  is "not reached at this budget" — never "contradicts" — and the rule's own verdict is kept as ``ungated_verdict``.
"""

from __future__ import annotations

import numpy as np
import pytest
from synthetic import auc_pools, ir_arm, peaked, rising, scores

from st_magnitude.lab.replication.claims import get_claim
from st_magnitude.lab.replication.gates import NOT_REACHED, apply_gates, converged

N_Q = 60
SEEDS = (0, 1, 2)


def decide(claim_id: str, seeds: list[dict], **settings) -> dict:
    claim = get_claim(claim_id)
    return claim.decide(seeds, {**claim.settings("cpu"), **settings})


def verdicts(decision: dict) -> dict[str, str]:
    """``{statement name: verdict}`` of a decision."""
    return {st["name"]: st["verdict"] for st in decision["statements"]}


# ---------------------------------------------------------------------------------------------------- 000-table5
def table5_seeds(*, cosine: float, base: float, one_sided: dict[str, float], n: int = 300) -> list[dict]:
    """STS predictions = label + noise; the noise level sets each arm's Spearman (more noise, lower Spearman)."""
    labels = np.random.default_rng(99).uniform(0, 1, n)
    out = []
    for seed in SEEDS:
        rng = np.random.default_rng(seed)

        def arm(noise: float) -> dict:
            pred = labels + rng.normal(0, noise, n)
            m = {"spearman": 0.0, "spearman_cosine_eval": 0.0, "spearman_sent1norm": 0.0, "spearman_sent2norm": 0.0}
            return {"sts-b": {"metrics": m, "predictions": pred.tolist()}}

        arms = {"base": arm(base), "cosine": arm(cosine), "dot": arm(cosine)}
        arms.update({name: arm(noise) for name, noise in one_sided.items()})
        out.append({"arms": arms, "labels": labels.tolist(), "calibrated_lambda": 0.05})
    return out


LAMBDAS = (0.01, 0.1, "calibrated", "calibrated-one-sided")
ONE_SIDED = [f"{a}@{lam}" for a in ("sent1norm", "sent2norm") for lam in LAMBDAS]


def test_table5_identical_arms_do_not_reproduce():
    seeds = table5_seeds(cosine=0.3, base=1.0, one_sided={a: 0.3 for a in ONE_SIDED})
    assert decide("000-table5", seeds, n_boot=100)["verdict"] not in ("reproduces", NOT_REACHED)


def test_table5_collapse_at_one_lambda_only_does_not_reproduce():
    """The audit's case: only λ = 0.01 collapses; the effect of a training side effect, not of one-sidedness."""
    noise = {a: (3.0 if a.endswith("@0.01") else 0.3) for a in ONE_SIDED}
    out = decide("000-table5", table5_seeds(cosine=0.3, base=1.0, one_sided=noise), n_boot=100)
    assert out["verdict"] != "reproduces"
    # the paper's number (λ = 0.01) and its mechanism (every λ) get their own verdicts
    assert verdicts(out) == {"the paper's number": "reproduces", "its mechanism": "contradicts"}
    assert out["verdict"] == "the paper's number: reproduces; its mechanism: contradicts"
    mechanism = out["statements"][1]
    assert len(mechanism["parts"]) == 8 and "Holm" in mechanism["multiplicity"]


def test_table5_collapse_at_every_lambda_reproduces_and_the_gate_holds_it_back_when_cosine_did_not_train():
    collapsed = {a: 3.0 for a in ONE_SIDED}
    ok = decide("000-table5", table5_seeds(cosine=0.3, base=1.0, one_sided=collapsed), n_boot=100)
    assert ok["verdict"] == "reproduces" and all(g["passed"] for g in ok["gates"])
    untrained = decide("000-table5", table5_seeds(cosine=0.3, base=0.3, one_sided=collapsed), n_boot=100)
    assert untrained["verdict"] == NOT_REACHED and untrained["ungated_verdict"] == "reproduces"


# -------------------------------------------------------------------------------------------------- 000-headline
def headline_seeds(*, pick: str, gain: float, trained: float, ood_cosine: float = 0.3) -> list[dict]:
    diff = np.random.default_rng(7).uniform(-0.1, 0.1, N_Q)  # per-query difficulty shared by every arm
    out = []
    for seed in SEEDS:
        rng = np.random.default_rng(seed)

        def arm(ood: float, ind: float) -> dict:
            return {
                "scifact": ir_arm({"ndcg@10": scores(rng, N_Q, ood, base=diff)}),
                "nfcorpus": ir_arm({"ndcg@10": scores(rng, N_Q, ind, base=diff)}),
            }

        arms = {
            "base": arm(0.2, 0.2),
            "cosine": arm(ood_cosine, 0.2 + trained),
            "dot": arm(ood_cosine, 0.2 + trained),
            "qnorm": arm(ood_cosine + (gain if pick == "qnorm" else 0.0), 0.2 + trained),
            "dnorm": arm(ood_cosine + (gain if pick == "dnorm" else 0.0), 0.2 + trained),
        }
        out.append({"arms": arms, "kappa": {"recommendation": pick}})
    return out


def test_headline_without_a_one_sided_pick_is_not_reached():
    """κ picked cosine in every seed: the claim (about a one-sided pick) was never tested — not 'inconclusive'."""
    out = decide("000-headline", headline_seeds(pick="cosine", gain=0.0, trained=0.1))
    assert out["verdict"] == NOT_REACHED and "never tested" in out["note"]


def test_headline_pick_level_with_cosine_does_not_reproduce():
    assert decide("000-headline", headline_seeds(pick="qnorm", gain=0.0, trained=0.1))["verdict"] != "reproduces"


def test_headline_pick_worse_than_cosine_contradicts():
    assert decide("000-headline", headline_seeds(pick="qnorm", gain=-0.08, trained=0.1))["verdict"] == "contradicts"


def test_headline_gain_reproduces_and_the_gate_stops_an_untrained_run():
    ok = decide("000-headline", headline_seeds(pick="dnorm", gain=0.08, trained=0.1))
    assert ok["verdict"] == "reproduces"
    bad = decide("000-headline", headline_seeds(pick="dnorm", gain=-0.08, trained=0.0))
    assert bad["verdict"] == NOT_REACHED and bad["ungated_verdict"] == "contradicts"  # never blamed on the paper


# ------------------------------------------------------------------------------------------------------ 000-appf
def appf_seeds(*, collapse: float, recover: float, trained: float = 0.1) -> list[dict]:
    diff = np.random.default_rng(3).uniform(-0.1, 0.1, N_Q)
    out = []
    for seed in SEEDS:
        rng = np.random.default_rng(seed)

        def arm(own: float, cos: float, dot: float, flag: float) -> dict:
            per_query = {
                "ndcg@10": scores(rng, N_Q, own, base=diff),
                "ndcg@10_cosine": scores(rng, N_Q, cos, base=diff),
                "ndcg@10_dot": scores(rng, N_Q, dot, base=diff),
            }
            return {"nfcorpus": ir_arm(per_query, dual_collapse_flag=flag)}

        out.append(
            {
                "arms": {
                    "base": arm(0.3, 0.3, 0.3, 0.0),
                    "dot-little": arm(0.3, 0.3 - collapse, 0.3, float(collapse > 0)),
                    "dnorm-little": arm(0.3 + trained - recover, 0.3, 0.3, 0.0),
                    "dnorm-more": arm(0.3 + trained, 0.3, 0.3, 0.0),
                }
            }
        )
    return out


def test_appf_identical_arms_do_not_reproduce():
    assert decide("000-appf", appf_seeds(collapse=0.0, recover=0.0))["verdict"] != "reproduces"


def test_appf_collapse_and_recovery_reproduce_and_the_gate_stops_an_untrained_run():
    assert decide("000-appf", appf_seeds(collapse=0.15, recover=0.05))["verdict"] == "reproduces"
    bad = decide("000-appf", appf_seeds(collapse=0.15, recover=0.05, trained=0.0))
    assert bad["verdict"] == NOT_REACHED


# ----------------------------------------------------------------------------------------------------------- 001
def mw_seeds(
    *, auc_gain: float, ndcg_gap: float, trained: float = 0.1, history=peaked, shuffled=False, only=None
) -> list:
    """Seeds of 001's three arms on both sets; ``only`` names the one set where MW differs from InfoNCE."""
    diff = np.random.default_rng(5).uniform(-0.1, 0.1, N_Q)
    out = []
    for seed in SEEDS:
        rng = np.random.default_rng(seed)

        def arm(ndcg: float, shift: float) -> dict:
            pools = auc_pools(rng, N_Q, shift)
            if shuffled:  # the control: positives and negatives relabelled at random
                both = np.array(pools["positives"] + pools["negatives"])
                rng.shuffle(both)
                pools["positives"], pools["negatives"] = (
                    both[: len(pools["positives"])].tolist(),
                    both[len(pools["positives"]) :].tolist(),
                )
            return ir_arm({"ndcg@10": scores(rng, N_Q, ndcg, sd=0.01, base=diff)}, pools, best_step=100)

        arms = {}
        for name, ndcg, shift in (
            ("base", 0.2, 0.3),
            ("infonce", 0.2 + trained, 0.5),
            ("mw", 0.2 + trained + ndcg_gap, 0.5 + auc_gain),
        ):
            plain = (0.2 + trained, 0.5) if name == "mw" else (ndcg, shift)
            arms[name] = {ds: arm(*((ndcg, shift) if only in (None, ds) else plain)) for ds in ("nfcorpus", "scifact")}
        out.append({"arms": arms, "dev_history": {"infonce": history(8), "mw": history(8)}})
    return out


def test_mw_identical_to_infonce_does_not_reproduce():
    assert decide("001", mw_seeds(auc_gain=0.0, ndcg_gap=0.0), n_boot=100)["verdict"] != "reproduces"


def test_mw_shuffled_control_does_not_reproduce():
    """MW's pools with positive/negative labels shuffled: pooled AUC ≈ 0.5, below InfoNCE's → contradicts."""
    seeds = mw_seeds(auc_gain=0.0, ndcg_gap=0.0)
    for s, shuffled in zip(seeds, mw_seeds(auc_gain=0.0, ndcg_gap=0.0, shuffled=True)):
        s["arms"]["mw"] = shuffled["arms"]["mw"]
    assert decide("001", seeds, n_boot=100)["verdict"] == "contradicts"


def test_mw_auc_gain_at_par_ndcg_reproduces():
    assert decide("001", mw_seeds(auc_gain=0.3, ndcg_gap=0.0), n_boot=100)["verdict"] == "reproduces"


def test_mw_is_judged_on_the_profiles_first_set():
    """cpu judges NFCorpus (in distribution), gpu SciFact (about one positive per query): an AUC gain on one set only
    reproduces under the profile that judges that set, and the other profile does not call it reproduced."""
    claim = get_claim("001")
    on_scifact = mw_seeds(auc_gain=0.3, ndcg_gap=0.0, only="scifact")
    gpu = claim.decide(on_scifact, {**claim.settings("gpu"), "n_boot": 100})
    cpu = claim.decide(on_scifact, {**claim.settings("cpu"), "n_boot": 100})
    assert claim.settings("gpu")["eval_data"][0] == "scifact" and claim.settings("cpu")["eval_data"][0] == "nfcorpus"
    assert gpu["verdict"] == "reproduces" and cpu["verdict"] != "reproduces"
    assert gpu["ours"].startswith("SciFact pooled AUC") and "SciFact" in gpu["statements"][0]["tests"]


def test_mw_gates_untrained_reference_and_unconverged_dev():
    untrained = decide("001", mw_seeds(auc_gain=-0.3, ndcg_gap=0.0, trained=0.0), n_boot=100)
    assert untrained["verdict"] == NOT_REACHED and untrained["ungated_verdict"] == "contradicts"
    still_rising = decide("001", mw_seeds(auc_gain=0.3, ndcg_gap=0.0, history=rising), n_boot=100)
    assert still_rising["verdict"] == NOT_REACHED and still_rising["ungated_verdict"] == "reproduces"
    assert [g["passed"] for g in still_rising["gates"]] == [True, False, False]


# ----------------------------------------------------------------------------------------------------------- 002
def l2dir_seeds(*, infotn: float, l2dir: float, trained: float = 0.2) -> list[dict]:
    out = []
    for seed in SEEDS:
        rng = np.random.default_rng(seed)

        def arm(p: float) -> dict:
            per_query = {"recall@1": (rng.uniform(0, 1, N_Q) < p).astype(float), "ndcg@10": scores(rng, N_Q, p)}
            return {"scifact": ir_arm(per_query), "nfcorpus": ir_arm(per_query)}

        control = 0.2 + trained
        arms = {"base": arm(0.2), "infonce": arm(control), "infotn": arm(infotn), "l2dir": arm(l2dir)}
        arms["infonce+nap"] = arm(control)
        out.append({"arms": arms})
    return out


def test_l2dir_identical_arms_do_not_reproduce():
    assert decide("002", l2dir_seeds(infotn=0.4, l2dir=0.4))["verdict"] != "reproduces"


def test_l2dir_worse_than_the_nap_control_does_not_reproduce():
    out = decide("002", l2dir_seeds(infotn=0.02, l2dir=0.05))
    assert verdicts(out) == {"the collapse": "reproduces", "L2Dir non-inferior": "contradicts"}


def test_infotn_a_little_worse_than_infonce_is_no_collapse():
    """The audit's case: InfoTN keeps most of InfoNCE's gain over the base. Threshold 0 called that 'reproduces'
    (InfoTN is worse); a collapse needs more than half the gain lost, so the collapse is contradicted."""
    out = decide("002", l2dir_seeds(infotn=0.93, l2dir=0.95, trained=0.75))
    assert verdicts(out)["the collapse"] == "contradicts"
    part = out["statements"][0]["parts"][0]
    gain = out["comparisons"]["infonce-base/recall@1/scifact"]["diff"]
    assert part["threshold"] == pytest.approx(-0.5 * gain)


def test_l2dir_holds_and_the_gate_stops_an_untrained_run():
    assert decide("002", l2dir_seeds(infotn=0.0, l2dir=0.4), margin=0.1)["verdict"] == "reproduces"
    bad = decide("002", l2dir_seeds(infotn=0.0, l2dir=0.0, trained=0.0))
    assert bad["verdict"] == NOT_REACHED and bad["statements"][1]["ungated_verdict"] == "contradicts"
    assert {st["verdict"] for st in bad["statements"]} == {NOT_REACHED}


# ----------------------------------------------------------------------------------------------------------- 003
DIMS = [32, 64, 128, 256, 512, 1024, 2048]


def dim_seeds(law, *, base_gap: float = 0.3, noise: float = 0.003) -> list[dict]:
    difficulty = np.random.default_rng(11).normal(0, 0.2, N_Q)  # per-query CE offset shared by every D
    out = []
    for seed in SEEDS:
        rng = np.random.default_rng(seed)

        def arm(level: float) -> dict:
            per_query = level + difficulty + rng.normal(0, 0.01, N_Q)
            return {"nfcorpus": ir_arm({"contrastive_entropy": per_query - per_query.mean() + level})}

        arms = {"base": arm(law(DIMS[-1]) + base_gap)}
        arms.update({f"D={d}": arm(law(d) + rng.normal(0, noise)) for d in DIMS})
        out.append({"arms": arms})
    return out


def test_dimension_flat_ce_does_not_reproduce():
    assert decide("003", dim_seeds(lambda d: 5.3), fit_bootstrap=0)["verdict"] != "reproduces"


def test_dimension_straight_line_in_log_d_does_not_reproduce():
    """CE linear in log D (no saturation): the law fits as well as the line, AIC prefers the line."""
    out = decide("003", dim_seeds(lambda d: 5.6 - 0.05 * np.log(d)), fit_bootstrap=0)
    assert out["verdict"] != "reproduces" and out["laws"]["delta_aic_line"] < 2


def test_dimension_hinge_in_log_d_does_not_reproduce():
    """A fall that stops at a knee (another saturating curve): the law must beat it by ΔAIC ≥ 2."""
    out = decide("003", dim_seeds(lambda d: 5.3 + 0.03 * min(np.log(d) - np.log(256), 0.0)), fit_bootstrap=0)
    assert out["verdict"] != "reproduces" and out["laws"]["delta_aic_hinge"] < 2


def test_dimension_power_law_reproduces_with_alpha_next_to_the_papers():
    out = decide("003", dim_seeds(lambda d: 100.0 / d**1.7 + 4.5), fit_bootstrap=50)
    assert out["verdict"] == "reproduces", out["parts"]
    assert out["alpha"]["paper"] == [1.71, 1.73] and out["alpha"]["ci"][0] < 1.7 < out["alpha"]["ci"][1]


def test_dimension_gate_stops_a_run_that_did_not_beat_the_base():
    out = decide("003", dim_seeds(lambda d: 100.0 / d**1.7 + 4.5, base_gap=0.0), fit_bootstrap=0)
    assert out["verdict"] == NOT_REACHED and out["ungated_verdict"] == "reproduces"


# ----------------------------------------------------------------------------------------------------------- 004
def revela_seeds(*, gain: float, random_gain: float, signal: float, start: float = 0.0) -> list[dict]:
    """``signal``: how far training moves CE(real Sim) − CE(shuffled Sim) from its step-0 level ``start``."""
    diff = np.random.default_rng(13).uniform(-0.1, 0.1, N_Q)
    out = []
    for seed in SEEDS:
        rng = np.random.default_rng(seed)

        def arm(level: float) -> dict:
            return {ds: ir_arm({"ndcg@10": scores(rng, N_Q, level, base=diff)}) for ds in ("scifact", "nfcorpus")}

        first = {"step": 0, "ce_real_minus_shuffled": start, "ce_minus_plain": 0.0}
        diag = {"step": 150, "ce_real_minus_shuffled": start + signal + rng.normal(0, 0.001), "ce_minus_plain": -0.1}
        out.append(
            {
                "arms": {"raw": arm(0.3), "revela": arm(0.3 + gain), "random": arm(0.3 + random_gain)},
                "history": {"revela": [first, diag], "random": [first, dict(diag)]},
                "diagnostics": {"revela": diag, "random": dict(diag)},
            }
        )
    return out


def test_revela_no_better_than_random_grouping_does_not_reproduce():
    assert decide("004", revela_seeds(gain=0.1, random_gain=0.1, signal=-0.05))["verdict"] != "reproduces"


def test_revela_gain_reproduces_and_the_gate_needs_the_relevance_signal():
    assert decide("004", revela_seeds(gain=0.1, random_gain=0.0, signal=-0.05))["verdict"] == "reproduces"
    bad = decide("004", revela_seeds(gain=-0.1, random_gain=0.0, signal=0.01))
    assert bad["verdict"] == NOT_REACHED and bad["ungated_verdict"] == "contradicts"


def test_revela_gate_judges_what_training_did_to_the_signal_not_its_step0_level():
    """The level of CE(real) − CE(shuffled) is set at step 0 by the seed's probe draw (the cpu seeds: −0.33 to
    +0.25 nats before any training): a signal that starts below 0 and never moves does not pass the gate, and one
    that starts above 0 and falls does."""
    still = decide("004", revela_seeds(gain=0.1, random_gain=0.0, signal=0.0, start=-0.3))
    assert still["verdict"] == NOT_REACHED and still["ungated_verdict"] == "reproduces"
    assert [r["step0"] for r in still["signal"]["revela"]] == [-0.3] * len(SEEDS)
    assert all(abs(r["change"]) < 0.01 for r in still["signal"]["revela"])
    fell = decide("004", revela_seeds(gain=0.1, random_gain=0.0, signal=-0.1, start=0.25))
    assert fell["verdict"] == "reproduces", fell["gates"]
    assert [r["change"] for r in fell["signal"]["revela"]] == pytest.approx([-0.1] * len(SEEDS), abs=0.01)
    assert "(change since step 0)" in fell["ours"] and "nan" not in fell["ours"]


def test_revela_gate_fails_without_the_step0_check():
    seeds = revela_seeds(gain=0.1, random_gain=0.0, signal=-0.1)
    for s in seeds:
        s["history"]["revela"] = s["history"]["revela"][1:]
    out = decide("004", seeds)
    assert out["verdict"] == NOT_REACHED and "no step-0" in out["gates"][0]["reason"]
    assert out["signal"]["revela"] == [] and "(change since step 0)" not in out["ours"] and "nan" not in out["ours"]


# ---------------------------------------------------------------------------------------------------------- gates
def test_converged_gate_reads_the_dev_history():
    assert converged([peaked(6), peaked(5)], key="dev", tol=0.0, arm="a")["passed"]
    assert not converged([peaked(6), rising(5)], key="dev", tol=0.0, arm="a")["passed"]
    assert converged([rising(5)], key="dev", tol=0.05, arm="a")["passed"]  # gains below tol count as converged
    assert not converged([[{"step": 0, "dev": 0.1}]], key="dev", tol=0.0, arm="a")["passed"]
    with pytest.raises(ValueError, match="tol"):
        converged([], key="dev", tol=-1, arm="a")


def test_converged_gate_refuses_a_peak_the_schedule_does_not_resolve():
    """Best at the first trained check, then a collapse (the shape of a too-coarse schedule or a learning rate that
    diverges after warm-up): early stopping "stopped", but nothing says where the peak was, so the gate fails; so
    does a history that never beats its step-0 score."""
    first_check = [{"step": 0, "dev": 0.055}, {"step": 50, "dev": 0.105}] + [
        {"step": 50 * i, "dev": 0.04 + 0.002 * i} for i in range(2, 6)
    ]
    gate = converged([peaked(6), first_check], key="dev", tol=0.002, arm="a")
    assert not gate["passed"] and "first dev check" in gate["reason"] and "1/2" in gate["reason"]
    never = [{"step": 50 * i, "dev": 0.1 - 0.01 * i} for i in range(5)]
    gate = converged([never], key="dev", tol=0.002, arm="a")
    assert not gate["passed"] and "never above the step-0" in gate["reason"]
    # the same rise and fall, resolved by a finer schedule, passes
    fine = [{"step": 10 * i, "dev": 0.1 - 0.004 * abs(i - 3)} for i in range(8)]
    assert converged([fine], key="dev", tol=0.002, arm="a")["passed"]


def test_apply_gates_never_turns_a_failed_gate_into_contradicts():
    for verdict in ("reproduces", "contradicts", "inconclusive"):
        out = apply_gates({"verdict": verdict}, [{"gate": "g", "passed": False, "reason": "r"}])
        assert out["verdict"] == NOT_REACHED and out["ungated_verdict"] == verdict
        assert apply_gates({"verdict": verdict}, [{"gate": "g", "passed": True, "reason": "r"}])["verdict"] == verdict


def test_a_record_decided_again_carries_the_current_rule_and_keeps_the_one_it_ran_under():
    """A verdict recomputed after the claim's rule was revised (``--redecide``, ``--merge``) must not sit under the
    old rule's text: the record takes the current text and keeps the old one, which the page prints."""
    from st_magnitude.lab.replication.runner import decide_again

    claim = get_claim("004")
    record = {
        "claim": "004",
        "profile": "cpu",
        "verdict_rule": "an earlier gate on the final level",
        "settings": claim.settings("cpu"),
        "seeds": revela_seeds(gain=0.1, random_gain=0.0, signal=0.0, start=-0.3),
    }
    decide_again(record)
    assert record["verdict_rule"] == claim.verdict_rule
    assert record["verdict_rule_when_run"] == "an earlier gate on the final level"
    assert record["verdict"] == NOT_REACHED
    decide_again(record)  # deciding again under the same rule keeps the first rule it ran under
    assert record["verdict_rule_when_run"] == "an earlier gate on the final level"
    current = dict(record, verdict_rule_when_run=None)
    decide_again(current)
    assert current["verdict_rule_when_run"] is None
