"""Paper 003: contrastive entropy falls as a power law in the output dimension, ``L(D) = A/D^α + δ``.

Per seed and dimension D the same base gets a fresh :class:`~st_magnitude.modules.DimensionProjection` (d → D, D up
to 16× the hidden size, as the paper's grid) and is fine-tuned on the same NFCorpus train pairs with InfoNCE on
cosine (:class:`~st_magnitude.losses.PartialNormInfoNCELoss`, scale 50 — the paper's Ettin-style cosine recipe);
contrastive entropy (paper 003 §3.6.1: each (query, positive) against 256 seeded uniform corpus negatives,
:func:`st_magnitude.evaluation.entropy.contrastive_entropy`) is measured on NFCorpus test — aligned with the
training data, as the paper fits on aligned evaluation data. The untrained base (no projection) is scored the same way.

The law must beat the naive alternatives, not only fit: it is compared by AIC with a hinge in log D (another
saturating curve), a straight line in log D and a constant (:func:`law_comparison`), and its prediction of the
held-out largest dimensions is judged relative to the size of the fall (a law that repeats the last value, or a flat
guess, is off by a small fraction of CE itself but by
most of the fall).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from st_magnitude import apply_similarity
from st_magnitude.evaluation import contrastive_entropy, encode_roles, stats, verdicts
from st_magnitude.evaluation.entropy import sample_negatives
from st_magnitude.lab.engine.data import retrieval_pairs
from st_magnitude.lab.engine.models import base_model, describe_model
from st_magnitude.lab.replication.claim import Claim
from st_magnitude.lab.replication.claims._retrieval import fine_tune
from st_magnitude.lab.replication.claims._shared import eval_sets, retrieval_profile
from st_magnitude.lab.replication.common import Context, beir_folder
from st_magnitude.lab.replication.gates import apply_gates, beats_base
from st_magnitude.losses import PartialNormInfoNCELoss
from st_magnitude.modules import DimensionProjection

#: paper 003 Table 1, BERT-L2-H128-A2 (bert-tiny's shape): α on MS MARCO Dev and on TREC DL
PAPER_ALPHA = (1.71, 1.73)


def _ce(model, es, n_negatives: int, scale: float) -> list[float]:
    positives = {q: {d for d, g in es.qrels[q].items() if g > 0 and d in set(es.doc_ids)} for q in es.query_ids}
    negatives = sample_negatives(es.query_ids, es.doc_ids, positives, n_negatives, seed=0)
    q, d = encode_roles(model, es.queries, es.docs, batch_size=64)
    pos_of = {cid: i for i, cid in enumerate(es.doc_ids)}
    pos = [d[[pos_of[x] for x in sorted(positives[qid])]] for qid in es.query_ids]
    neg = [d[[pos_of[x] for x in negatives[qid]]] for qid in es.query_ids]
    _, per_query = contrastive_entropy(q, pos, neg, similarity="cosine", scale=scale)
    return per_query


def _arm(per_query: list[float], dim: int, info: dict | None = None) -> dict:
    metrics = {"contrastive_entropy": float(np.mean(per_query)), "dim": int(dim), **(info or {})}
    return {"metrics": metrics, "per_query": {"contrastive_entropy": per_query}}


def run_seed(ctx: Context) -> dict:
    s = ctx.settings
    (es,) = eval_sets(ctx, (s["eval_data"],))
    pairs = retrieval_pairs(beir_folder(ctx, s["train_data"]), s["steps"] * s["batch_size"], ctx.seed)
    base = base_model(ctx.model or s["model"], device=ctx.device, max_seq_length=s["max_seq_length"])
    with torch.no_grad():
        arms = {"base": {es.name: _arm(_ce(base, es, s["n_negatives"], s["scale"]), base.get_embedding_dimension())}}
    del base
    for dim in s["dims"]:

        def prepare(model, dim=dim):
            model.append(DimensionProjection(model.get_embedding_dimension(), int(dim), seed=ctx.seed))
            apply_similarity(model, "cosine", warn_on_strip=False)
            loss = PartialNormInfoNCELoss(model, similarity=None, scale=s["scale"])
            return loss, {"learning_rate_mapping": {r"\.linear\.": s["projection_lr"]}}

        model, loss, info = fine_tune(ctx, prepare=prepare, pairs=pairs)
        with torch.no_grad():
            arms[f"D={dim}"] = {es.name: _arm(_ce(model, es, s["n_negatives"], s["scale"]), dim, info)}
        del model, loss
    return {"arms": arms}


def _aic(sse: float, n: int, k: int) -> float:
    return n * math.log(max(sse, 1e-300) / n) + 2 * k


def fit_hinge(x, y) -> np.ndarray:
    """Least-squares hinge in ``x`` (3 parameters): ``a + b · min(x − c, 0)`` — a straight fall that stops at a knee
    ``c`` and stays flat after it (a saturating curve that is no power law). The knee is searched on a fine grid
    over the range of ``x`` (for each knee the fit is linear). Returns the fitted values."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    best, fitted = math.inf, y * 0 + y.mean()
    for c in np.linspace(x.min(), x.max(), 801):
        design = np.stack([np.ones_like(x), np.minimum(x - c, 0.0)], axis=1)
        coef, *_ = np.linalg.lstsq(design, y, rcond=None)
        pred = design @ coef
        sse = float(np.sum((pred - y) ** 2))
        if sse < best:
            best, fitted = sse, pred
    return fitted


def law_comparison(dims, losses) -> dict:
    """AIC of the power law (3 parameters), a hinge in log D (3: a fall that stops at a knee), a straight line in
    log D (2) and a constant (1) fitted to the same points; ``delta_aic_<alternative>`` is the alternative's AIC
    minus the law's (> 0: the law is better)."""
    from st_magnitude.scaling import fit_dimension_law

    x, y = np.asarray(dims, dtype=float), np.asarray(losses, dtype=float)
    n = len(y)
    law = fit_dimension_law(x, y)
    slope, icpt = np.polyfit(np.log(x), y, 1)
    sse = {
        "power_law": float(np.sum((law.predict(x) - y) ** 2)),
        "hinge_log_d": float(np.sum((fit_hinge(np.log(x), y) - y) ** 2)),
        "line_log_d": float(np.sum((icpt + slope * np.log(x) - y) ** 2)),
        "constant": float(np.sum((y.mean() - y) ** 2)),
    }
    aic = {m: _aic(v, n, k) for (m, v), k in zip(sse.items(), (3, 3, 2, 1))}
    return {
        "sse": sse,
        "aic": aic,
        "delta_aic_hinge": aic["hinge_log_d"] - aic["power_law"],
        "delta_aic_line": aic["line_log_d"] - aic["power_law"],
        "delta_aic_constant": aic["constant"] - aic["power_law"],
    }


#: the alternatives the law must beat by ΔAIC, as ``law_comparison`` names them
ALTERNATIVES = {"hinge": "a hinge in log D", "line": "a straight line in log D", "constant": "a constant"}


def judge(decision: dict, settings: dict) -> dict:
    """The fall (an interval part) and the law (AIC against every alternative and the held-out error), from the
    seed-mean CE by D the decision stores (``per_dim``) and its fall comparison."""
    from st_magnitude.scaling import fit_dimension_law

    dims = [int(d) for d in settings["dims"]]
    n_fit = int(settings["n_fit"])
    means = np.array([decision["per_dim"][str(d)]["estimate"] for d in dims])
    fall_part = verdicts.verdict(decision["comparisons"]["fall"], expect="less")
    # held-out: the law fitted to the n_fit smallest D predicts the others; error relative to the measured fall
    pred = fit_dimension_law(dims[:n_fit], means[:n_fit]).predict(dims[n_fit:])
    size = float(means[0] - means[-1])
    worst = float(np.max(np.abs(pred - means[n_fit:])))
    rel = worst / size if size > 0 else math.inf
    laws = law_comparison(dims, means)
    gap, need = settings["max_holdout_fall_error"], settings["min_delta_aic"]
    deltas = {k: laws[f"delta_aic_{k}"] for k in ALTERNATIVES}
    beats = all(v >= need for v in deltas.values())
    loses = any(v <= -need for v in deltas.values())
    law_part = {
        "verdict": "reproduces"
        if beats and rel <= gap
        else "contradicts"
        if loses or rel > 5 * gap
        else "inconclusive",
        "claim": f"ΔAIC ≥ {need:g} over {', '.join(ALTERNATIVES.values())}, and the held-out D error ≤ "
        f"{gap:.0%} of the fall",
        "reason": "ΔAIC "
        + ", ".join(f"{k} {v:+.2f}" for k, v in deltas.items())
        + f"; fitted on D ≤ {dims[n_fit - 1]}, held-out D {dims[n_fit:]}: measured "
        f"{np.round(means[n_fit:], 4).tolist()}, predicted {np.round(pred, 4).tolist()} "
        f"(worst |error| {worst:.4f} = {rel:.0%} of the fall {size:.4f})",
    }
    out = verdicts.judge(
        [
            verdicts.statement(
                "the law",
                "CE falls from the smallest to the largest D, and a power law in D explains the fall better than a "
                "hinge, a line in log D or a constant and predicts the held-out largest D",
                [fall_part, law_part],
                multiplicity="one interval part; the law part is a model comparison (ΔAIC ≥ 2), not a test at "
                "level 0.025: its error rates are the simulated ones, so no correction applies",
            )
        ]
    )
    out["laws"] = laws
    out["holdout"] = {"dims": dims[n_fit:], "measured": means[n_fit:].tolist(), "predicted": pred.tolist()}
    out["holdout"].update(worst_abs_error=worst, fall=size, error_over_fall=rel)
    return out


def decide(seeds: list[dict], settings: dict) -> dict:
    from st_magnitude.scaling import fit_dimension_law

    ds = settings["eval_data"]
    dims = [int(d) for d in settings["dims"]]
    n_fit = int(settings["n_fit"])
    if not 3 <= n_fit < len(dims):
        raise ValueError(f"n_fit must be at least 3 and below the number of dimensions ({len(dims)}), got {n_fit}")
    per_dim = {d: [s["arms"][f"D={d}"][ds]["metrics"]["contrastive_entropy"] for s in seeds] for d in dims}
    means = np.array([np.mean(per_dim[d]) for d in dims])
    d_min, d_max = min(dims), max(dims)

    def ce_per_seed(arm: str) -> list:
        return [s["arms"][arm][ds]["per_query"]["contrastive_entropy"] for s in seeds]

    def cmp(a: str, b: str) -> stats.ArmComparison:
        return stats.compare_arms(
            ce_per_seed(a), ce_per_seed(b), metric=f"contrastive entropy ({ds})", arm_a=a, arm_b=b
        )

    fall = cmp(f"D={d_max}", f"D={d_min}")
    out: dict = {
        "per_dim": {str(d): stats.seed_interval(per_dim[d]).to_dict() for d in dims},
        "comparisons": {"fall": fall.to_dict()},
    }
    out.update(judge(out, settings))
    apply_gates(out, [beats_base(cmp(f"D={d_max}", "base"), lower_is_better=True)])
    laws, rel = out["laws"], out["holdout"]["error_over_fall"]
    fit = fit_dimension_law(dims, means, bootstrap=settings["fit_bootstrap"], seed=0)
    alpha_ci = fit.ci.get("alpha")
    out["fit"] = {
        **fit.params(),
        "r2": fit.r2,
        "ci": {k: list(v) for k, v in fit.ci.items()},
        "formula": fit.formula(),
    }
    out["alpha"] = {"ours": fit.alpha, "ci": list(alpha_ci) if alpha_ci else None, "paper": list(PAPER_ALPHA)}
    ci = f" [{alpha_ci[0]:.2f}, {alpha_ci[1]:.2f}]" if alpha_ci else ""
    out["ours"] = (
        "CE by D: "
        + ", ".join(f"{d}: {np.mean(per_dim[d]):.3f}" for d in dims)
        + f"; α {fit.alpha:.2f}{ci} (paper {PAPER_ALPHA[0]}–{PAPER_ALPHA[1]}); ΔAIC vs hinge "
        f"{laws['delta_aic_hinge']:+.1f}, vs line {laws['delta_aic_line']:+.1f}, vs constant "
        f"{laws['delta_aic_constant']:+.1f}; held-out error {rel:.0%} of the fall"
    )
    return out


_COMMON = dict(
    n_negatives=256,
    train_data="nfcorpus",
    eval_data="nfcorpus",
    n_fit=5,
    fit_bootstrap=200,
    max_holdout_fall_error=0.25,
    min_delta_aic=2.0,
)
#: paper 003's grid for a hidden size of 128: D = 32 … 2048 (φ = D/d from 1/4 to 16)
BERT_TINY_DIMS = [32, 64, 128, 256, 512, 1024, 2048]

CLAIM = Claim(
    id="003",
    paper="003",
    title="Contrastive entropy falls as a power law in the output dimension",
    statement=(
        "With everything else fixed, contrastive entropy follows L(D) = A/D^α + δ in the embedding dimension D "
        "(paper 003 eq. 5, §4)."
    ),
    paper_number="BERT-L2-H128 (bert-tiny's shape), D 32-2048: α 1.71 (MS MARCO Dev) / 1.73 (TREC DL), R² 0.998+",
    verdict_rule=(
        "gate: the trained largest-D arm has lower CE than the untrained base (whole 95% CI below 0), else "
        "'not reached at this budget'. Then reproduces if (a) CE(largest D) − CE(smallest D) < 0 (whole 95% CI "
        "below 0, paired over queries and seeds) and (b) on the seed-mean CE the power law beats a hinge in log D "
        "(a fall that stops at a knee), a straight line in log D and a constant by ΔAIC ≥ 2, and, fitted to the 5 "
        "smallest D, predicts the 2 largest within 25% of the measured fall; contradicts if (a) is contradicted, "
        "an alternative beats the law by ΔAIC ≥ 2, or "
        "the held-out error exceeds 125% of the fall; else inconclusive. α's 95% interval is reported next to "
        "the paper's."
    ),
    profiles={
        "cpu": retrieval_profile(
            "bert-tiny",
            {"dims": BERT_TINY_DIMS, "steps": 1000},
            learning_rate=1e-4,
            training={"projection_lr": 1e-3, "scale": 50.0},
            batch_size=32,
            max_seq_length=64,
            eval_queries=300,
            eval_corpus=1500,
            **_COMMON,
        ),
        "gpu": retrieval_profile(
            "bert-tiny",
            {"dims": BERT_TINY_DIMS, "steps": 3000},
            learning_rate=1e-4,
            training={"projection_lr": 1e-3, "scale": 50.0},
            batch_size=64,
            max_seq_length=128,
            **_COMMON,
        ),
    },
    differences={
        "cpu": [
            f"base: {describe_model('bert-tiny')} (BERT-L2-H128, the paper's smallest BERT) + a fresh "
            "DimensionProjection per D (32…2048, the paper's grid for H128)",
            "train: NFCorpus train, 1,000 steps × batch 32, InfoNCE on cosine (scale 50), in-batch negatives "
            "(paper: MS MARCO with KD + contrastive loss, far more steps)",
            "CE on NFCorpus test (aligned with training) subsampled to 300 queries / 1,500 docs, 256 seeded "
            "negatives per query",
        ],
        "gpu": [
            f"base: {describe_model('bert-tiny')} + DimensionProjection per D (32…2048), 3,000 steps × batch 64, "
            "max_seq_length 128, in-batch negatives; CE on the full NFCorpus test split",
        ],
    },
    can_establish={
        "cpu": "whether CE falls with D past the hidden size and whether a power law explains the fall better than "
        "a line in log D or a constant, for one small model trained briefly; not the paper's α (no KD, far less "
        "training), nor anything about larger models",
        "gpu": "the same with 3× the steps and the full test split; still one model size and no KD",
    },
    run_seed=run_seed,
    decide=decide,
    judge=judge,
    revised=(
        "after the committed 3-seed run: the law must also beat a hinge in log D (simulated: a power law passes "
        "90% of the time, a hinge 4%; without it a hinge, an exponential or a quadratic in log D passed 67-87%)"
    ),
    dry_run={"dims": [4, 8, 16, 32, 64], "n_fit": 3, "steps": 2, "fit_bootstrap": 0, "batch_size": 4}
    | {"max_seq_length": 16, "n_negatives": 8, "eval_queries": 6, "eval_corpus": 20},
)
