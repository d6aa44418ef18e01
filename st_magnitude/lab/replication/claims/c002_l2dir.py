"""Paper 002: InfoTN alone collapses; λ·InfoNCE + (1−λ)·InfoTN (L2Dir) is at least as good as InfoNCE alone.

Arms of :class:`~st_magnitude.losses.L2DirLoss` on the same base, pairs and seeds: λ = 1 (InfoNCE only, τ = 0.02),
λ = 0 (InfoTN only through the NAP head, τ_TN = 0.01), λ = 0.5 (L2Dir, paper eq. 8), and the paper's control for the
NAP head's extra parameters (paper 002 Table 3): λ·InfoNCE(embedding) + (1−λ)·InfoNCE(NAP output)
(:class:`NAPInfoNCEControl`). The untrained base is an arm too. Every retriever is evaluated by cosine, as L2Dir
serves it: Recall@1 (the paper's metric) on SciFact (about 1.1 relevant documents per query, so Recall@1 can move;
NFCorpus has about 38) and nDCG@10.
"""

from __future__ import annotations

import warnings

import torch

from st_magnitude.callbacks import LossStateCallback
from st_magnitude.evaluation import verdicts
from st_magnitude.lab.engine.data import retrieval_pairs
from st_magnitude.lab.engine.models import base_model, describe_model
from st_magnitude.lab.replication.claim import Claim
from st_magnitude.lab.replication.claims._retrieval import evaluate_all, fine_tune_and_eval
from st_magnitude.lab.replication.claims._shared import arm_summary, compare_metric, eval_sets, retrieval_profile
from st_magnitude.lab.replication.common import Context, beir_folder
from st_magnitude.lab.replication.gates import apply_gates, beats_base
from st_magnitude.losses import L2DirLoss
from st_magnitude.losses.info_tn import InfoTNCollapseWarning, info_nce_loss

JUDGED = "scifact"
ARMS = {"infonce": 1.0, "infotn": 0.0, "l2dir": 0.5}
CONTROL = "infonce+nap"


class NAPInfoNCEControl(L2DirLoss):
    """λ·InfoNCE(cosine on the embedding, τ) + (1−λ)·InfoNCE(cosine on the NAP output, τ): L2Dir's extra parameters
    (the NAP head) without InfoTN — the control of paper 002 Table 3 ("InfoNCE + InfoNCE (NAP)")."""

    def compute_loss_from_embeddings(self, embeddings, nap_inputs, labels=None, modalities=None):
        if self.gather_across_devices:
            raise ValueError(f"{type(self).__name__} is single-process only (gather_across_devices=False)")
        po = [self.nap_head.project(x, m) for x, m in zip(nap_inputs, modalities or ["text"] * len(nap_inputs))]
        rows = torch.arange(embeddings[0].size(0), device=embeddings[0].device)
        nce = info_nce_loss(embeddings[0], torch.cat(embeddings[1:]), self.temperature, labels=rows)
        nap = info_nce_loss(po[0], torch.cat(po[1:]), self.temperature, labels=rows)
        return {"infonce": self.lambda_ * nce, "infonce_nap": (1.0 - self.lambda_) * nap}


def run_seed(ctx: Context) -> dict:
    s = ctx.settings
    sets = eval_sets(ctx, tuple(s["eval_data"]))
    pairs = retrieval_pairs(beir_folder(ctx, s["train_data"]), s["steps"] * s["batch_size"], ctx.seed)
    base = base_model(ctx.model or s["model"], device=ctx.device, max_seq_length=s["max_seq_length"])
    arms = {"base": evaluate_all(base, sets, similarity="cosine", auc_negatives=s["auc_negatives"])}
    del base
    plan = [(arm, L2DirLoss, lam) for arm, lam in ARMS.items()] + [(CONTROL, NAPInfoNCEControl, 0.5)]
    for arm, cls, lam in plan:

        def prepare(model, cls=cls, lam=lam):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", InfoTNCollapseWarning)
                loss = cls(model, lambda_=lam, temperature=s["temperature"], tn_temperature=s["tn_temperature"])
            return loss, {}

        # the NAP head lives in the loss: the callback is how a user's run keeps it (the protocol never checkpoints,
        # so it changes nothing here but keeps the protocol the way the docs tell users to train)
        arms[arm] = fine_tune_and_eval(
            ctx,
            prepare=prepare,
            pairs=pairs,
            sets=sets,
            similarity="cosine",
            callbacks_for=lambda loss: [LossStateCallback(loss)],
        )
    return {"arms": arms}


#: a collapse is losing more than this share of InfoNCE's gain over the untrained base (the paper's: 95 %)
COLLAPSE_SHARE = 0.5


def judge(decision: dict, settings: dict) -> dict:
    """Two statements from the stored comparisons on SciFact: the collapse of InfoTN alone, and L2Dir's
    non-inferiority against InfoNCE given the same NAP head."""
    comps, margin, metric = decision["comparisons"], settings["margin"], settings["metric"]
    gain = comps[f"infonce-base/{metric}/{JUDGED}"]["diff"]
    collapse = verdicts.verdict(
        comps[f"infotn-infonce/{metric}/{JUDGED}"], expect="less", threshold=-COLLAPSE_SHARE * gain
    )
    collapse["margin_from"] = f"−{COLLAPSE_SHARE:g} × InfoNCE − base ({gain:+.4f}), the point estimate"
    return verdicts.judge(
        [
            verdicts.statement(
                "the collapse",
                f"InfoTN alone loses more than {COLLAPSE_SHARE:.0%} of InfoNCE's {metric} gain over the untrained "
                "base (the paper's: InfoTN 3.3 vs InfoNCE 63.7)",
                [collapse],
            ),
            verdicts.statement(
                "L2Dir non-inferior",
                f"L2Dir − (InfoNCE + InfoNCE on the NAP head) > −{margin:g} {metric}",
                [verdicts.verdict(comps[f"l2dir-{CONTROL}/{metric}/{JUDGED}"], expect="greater", threshold=-margin)],
            ),
        ]
    )


def decide(seeds: list[dict], settings: dict) -> dict:
    pairs = (("infotn", "infonce"), ("l2dir", "infonce"), ("l2dir", CONTROL), ("infotn", "base"), ("infonce", "base"))
    comparisons = {
        f"{a}-{b}/{m}/{ds}": compare_metric(seeds, a, b, ds, metric=m)
        for a, b in pairs
        for m in ("recall@1", "ndcg@10")
        for ds in settings["eval_data"]
    }
    metric = settings["metric"]
    out: dict = {"comparisons": {k: c.to_dict() for k, c in comparisons.items()}}
    out.update(judge(out, settings))
    apply_gates(out, [beats_base(comparisons[f"infonce-base/{metric}/{JUDGED}"])])
    out["arms"] = arm_summary(seeds, metrics=("ndcg@10", "recall@1"))
    a = out["arms"]
    t, l2 = comparisons[f"infotn-infonce/{metric}/{JUDGED}"], comparisons[f"l2dir-{CONTROL}/{metric}/{JUDGED}"]
    out["ours"] = (
        "SciFact Recall@1 / nDCG@10: "
        + ", ".join(
            f"{arm} {a[arm][JUDGED]['recall@1']['estimate']:.4f} / {a[arm][JUDGED]['ndcg@10']['estimate']:.4f}"
            for arm in ("base", *ARMS, CONTROL)
        )
        + f"; InfoTN − InfoNCE {t.diff:+.4f} [{t.ci.low:+.4f}, {t.ci.high:+.4f}]"
        + f"; L2Dir − (InfoNCE + NAP) {l2.diff:+.4f} [{l2.ci.low:+.4f}, {l2.ci.high:+.4f}]"
    )
    return out


_COMMON = dict(
    eval_data=["scifact", "nfcorpus"],
    train_data="nfcorpus",
    temperature=0.02,
    tn_temperature=0.01,
    auc_negatives=50,
    metric="recall@1",
    margin=0.02,
)

CLAIM = Claim(
    id="002",
    paper="002",
    title="InfoTN alone collapses; L2Dir ≥ InfoNCE",
    statement=(
        "InfoTN used alone collapses (ablation Recall@1 3.3 vs 63.7 for InfoNCE alone), while "
        "λ·InfoNCE + (1−λ)·InfoTN with the NAP head is at least as good as InfoNCE, also against InfoNCE given the "
        "same NAP head (paper 002 Tables 2-3, eq. 8)."
    ),
    paper_number="Recall@1: InfoNCE only 63.7, InfoTN only 3.3, L2Dir above InfoNCE (λ = 0.5; λ 0.1–0.9 all beat it)",
    verdict_rule=(
        "gate: InfoNCE-only beats the untrained base on SciFact Recall@1 (whole 95% CI above 0), else 'not reached "
        "at this budget'. Two statements on SciFact test Recall@1, each with its own verdict. The collapse: "
        "reproduces if InfoTN-only − InfoNCE-only < −½ × (InfoNCE-only − base), the point estimate of InfoNCE's "
        "gain (InfoTN keeps less than half of it), with the whole 95% CI below that margin; contradicts if the whole "
        "CI is above it. L2Dir non-inferior: reproduces if L2Dir − (InfoNCE + InfoNCE on the NAP head) > −0.02 "
        "with the whole CI above −0.02; contradicts if the whole CI is below. Else inconclusive. nDCG@10, NFCorpus, "
        "L2Dir − InfoNCE-only and InfoTN − base are reported."
    ),
    revised=(
        "after the committed 5-seed run: the collapse part had threshold 0 ('InfoTN is worse than InfoNCE'), which "
        "cannot test a collapse; it now needs InfoTN to lose more than half of InfoNCE's gain over the base, and "
        "the two parts are judged as separate statements"
    ),
    profiles={
        "cpu": retrieval_profile(
            "bert-tiny", {"steps": 800}, learning_rate=1e-4, batch_size=32, max_seq_length=64, **_COMMON
        ),
        "gpu": retrieval_profile("bert-tiny", {"steps": 3000}, learning_rate=5e-5, batch_size=64, **_COMMON),
    },
    differences={
        "cpu": [
            f"text-only retrieval with {describe_model('bert-tiny')} (paper: multimodal VLM2Vec-V2 / UniIR / CLIP)",
            "train: NFCorpus train, 800 steps × batch 32, lr 1e-4, max_seq_length 64; NAP = Linear(d, d) on the "
            "pooled embedding; judged zero-shot on the full SciFact test split (paper: in-distribution MMEB)",
        ],
        "gpu": [
            "text-only retrieval, base bert-tiny by default (pass --model <folder>)",
            "train: NFCorpus train, 3,000 steps × batch 64, lr 5e-5, max_seq_length 256; full test splits",
        ],
    },
    can_establish={
        "cpu": "for a small text encoder: whether InfoTN alone trains far worse than InfoNCE and whether L2Dir "
        "keeps Recall@1 within 0.02 of InfoNCE given the same NAP head; not the paper's multimodal gains",
        "gpu": "the same with a larger budget; other bases only with --model",
    },
    run_seed=run_seed,
    decide=decide,
    judge=judge,
    dry_run={"steps": 2, "batch_size": 4, "max_seq_length": 16, "auc_negatives": 5, "eval_queries": 6}
    | {"eval_corpus": 20},
)
