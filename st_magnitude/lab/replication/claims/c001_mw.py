"""Paper 001: the Mann–Whitney loss raises pooled ROC-AUC over InfoNCE at similar nDCG@10.

Two arms fine-tune the same base on the same (query, positive, 5 hard negatives) tuples and seeds: InfoNCE
(:class:`~st_magnitude.losses.PartialNormInfoNCELoss`, cosine, τ = 0.01 i.e. scale 100) and MW
(:class:`~st_magnitude.losses.MWLoss`, cosine, τ = 0.01). The hard negatives are mined by the base model from the
whole NFCorpus corpus (ranks after the first ``negative_skip`` non-positives, so near-duplicates of the positive are
not taken as negatives), as the paper trains with 5 hard negatives (paper 001 §5.1). Each arm trains with early
stopping on NFCorpus dev nDCG@10 (paper 001 §5.2). Every arm — and the untrained base — is evaluated by cosine on
the full NFCorpus and SciFact test corpora: pooled ROC-AUC over the positives and each query's top
``auc_negatives`` non-positives (paper 001 §5.1: 500, :func:`st_magnitude.evaluation.auc.pooled_auc_pools`) and
nDCG@10. The verdict is taken on the profile's first evaluation set (:func:`judged_set`): NFCorpus (in distribution)
in the cpu profile, SciFact (about one positive per query, like the paper's data; zero-shot) in the gpu profile.
"""

from __future__ import annotations

import random

import numpy as np
import torch

from st_magnitude import apply_similarity
from st_magnitude.evaluation import encode_roles, verdicts
from st_magnitude.lab.engine.evaluation import evaluate_retrieval
from st_magnitude.lab.engine.models import base_model, describe_model
from st_magnitude.lab.replication.claim import Claim
from st_magnitude.lab.replication.claims._early_stop import EarlyStopping
from st_magnitude.lab.replication.claims._retrieval import evaluate_all, fine_tune
from st_magnitude.lab.replication.claims._shared import (
    arm_summary,
    compare_auc,
    compare_metric,
    eval_sets,
    retrieval_profile,
)
from st_magnitude.lab.replication.common import Context, beir_folder, load_eval_set
from st_magnitude.lab.replication.gates import apply_gates, beats_base, converged, judge_stored
from st_magnitude.losses import MWLoss, PartialNormInfoNCELoss

ARMS = ("infonce", "mw")
NAMES = {"nfcorpus": "NFCorpus", "scifact": "SciFact"}


def mined_tuples(model, folder, *, n: int, n_negatives: int, skip: int, seed: int) -> dict[str, list[str]]:
    """``n`` seeded (query, positive, negative_1..negative_k) tuples from the train split of ``folder``: the negatives
    are the ``model``'s (cosine) top-ranked non-positives of the query over the whole corpus, after the first
    ``skip`` of them."""
    from st_magnitude.data import doc_text, load_beir

    data = load_beir(folder, "train", on_missing="drop")
    qids = sorted(q for q in data.qrels if any(g > 0 for g in data.qrels[q].values()))
    dids = sorted(data.corpus)
    texts = [doc_text(data.corpus[d]) for d in dids]
    q, d = encode_roles(model, [data.queries[x] for x in qids], texts, batch_size=128)
    q, d = torch.nn.functional.normalize(q.float(), dim=-1), torch.nn.functional.normalize(d.float(), dim=-1)
    row = {did: i for i, did in enumerate(dids)}
    depth = min(len(dids), skip + n_negatives + max(len(data.qrels[x]) for x in qids))
    top = torch.topk(q @ d.T, depth, dim=-1).indices.tolist()
    rows = []
    for qi, qid in enumerate(qids):
        positive = {row[x] for x, g in data.qrels[qid].items() if g > 0 and x in row}
        negatives = [j for j in top[qi] if j not in positive][skip : skip + n_negatives]
        if len(negatives) < n_negatives:
            continue
        rows += [(data.queries[qid], texts[p], *(texts[j] for j in negatives)) for p in sorted(positive)]
    if n > len(rows):
        raise ValueError(f"asked for {n} training tuples but {folder.name}/train has only {len(rows)}")
    random.Random(seed).shuffle(rows)
    columns = ["anchor", "positive", *(f"negative_{i + 1}" for i in range(n_negatives))]
    return {c: [r[i] for r in rows[:n]] for i, c in enumerate(columns)}


def run_seed(ctx: Context) -> dict:
    s = ctx.settings
    sets = eval_sets(ctx, tuple(s["eval_data"]))
    train_folder = beir_folder(ctx, s["train_data"])
    dev = load_eval_set(train_folder, split="dev", max_queries=s["dev_queries"], max_corpus=s["dev_corpus"], seed=0)
    base = base_model(ctx.model or s["model"], device=ctx.device, max_seq_length=s["max_seq_length"])
    # the base's pooled AUC is reported, never compared: its pools are not kept
    arms = {"base": evaluate_all(base, sets, similarity="cosine", auc_negatives=s["auc_negatives"])}
    tuples = mined_tuples(
        base,
        train_folder,
        n=s["steps"] * s["batch_size"],
        n_negatives=s["hard_negatives"],
        skip=s["negative_skip"],
        seed=ctx.seed,
    )
    del base
    tau = s["temperature"]
    losses = {
        "infonce": lambda model: PartialNormInfoNCELoss(model, similarity=None, scale=1.0 / tau),
        "mw": lambda model: MWLoss(model, similarity=None, temperature=tau),
    }
    history = {}
    for arm in ARMS:

        def prepare(model, arm=arm):
            apply_similarity(model, "cosine", warn_on_strip=False)
            return losses[arm](model), {}

        stoppers = []

        def callbacks_for(loss):
            def dev_score() -> float:
                return evaluate_retrieval(loss.model, dev, similarity="cosine", auc_negatives=10)["metrics"]["ndcg@10"]

            stoppers.append(EarlyStopping(loss.model, dev_score, every=s["eval_every"], patience=s["patience"]))
            return [stoppers[-1].callback]

        model, loss, info = fine_tune(ctx, prepare=prepare, pairs=tuples, callbacks_for=callbacks_for)
        arms[arm] = evaluate_all(model, sets, similarity="cosine", auc_negatives=s["auc_negatives"], keep_pools=True)
        for ds in arms[arm].values():
            ds["metrics"].update(info, best_step=stoppers[-1].best_step)
        history[arm] = stoppers[-1].history
        del model, loss
    return {"arms": arms, "dev_history": history}


def judge(decision: dict, settings: dict) -> dict:
    """One statement from the judged parts (Holm over its interval parts)."""
    return judge_stored(
        decision,
        "the paper's claim",
        f"MW raises {NAMES[judged_set(settings)]} pooled AUC over InfoNCE while nDCG@10 stays within the margin",
    )


def judged_set(settings: dict) -> str:
    """The set the verdict is taken on: the profile's first evaluation set (the others are reported)."""
    return settings["eval_data"][0]


def decide(seeds: list[dict], settings: dict) -> dict:
    judged = judged_set(settings)
    comparisons = {}
    for ds in settings["eval_data"]:
        comparisons[f"auc/{ds}"] = compare_auc(seeds, "mw", "infonce", ds, n_boot=settings["n_boot"])
        comparisons[f"ndcg/{ds}"] = compare_metric(seeds, "mw", "infonce", ds)
    reference = compare_metric(seeds, "infonce", "base", judged)
    margin = settings["ndcg_margin"]
    out = judge(
        {
            "parts": [
                verdicts.verdict(comparisons[f"auc/{judged}"], expect="greater", threshold=0.0),
                verdicts.verdict(comparisons[f"ndcg/{judged}"], expect="greater", threshold=-margin),
            ]
        },
        settings,
    )
    gates = [beats_base(reference)]
    gates += [
        converged([s["dev_history"][arm] for s in seeds], key="dev", tol=settings["converge_tol"], arm=arm)
        for arm in ARMS
    ]
    apply_gates(out, gates)
    out["comparisons"] = {k: c.to_dict() for k, c in comparisons.items()}
    out["comparisons"]["infonce-base/ndcg"] = reference.to_dict()
    out["arms"] = arm_summary(seeds)
    out["best_steps"] = {arm: [s["arms"][arm][judged]["metrics"]["best_step"] for s in seeds] for arm in ARMS}
    a, n = comparisons[f"auc/{judged}"], comparisons[f"ndcg/{judged}"]
    out["ours"] = (
        f"{NAMES[judged]} pooled AUC InfoNCE {a.mean_b:.4f} → MW {a.mean_a:.4f} ({a.diff:+.4f} [{a.ci.low:+.4f}, "
        f"{a.ci.high:+.4f}]); nDCG@10 {n.mean_b:.4f} → {n.mean_a:.4f} ({n.diff:+.4f} [{n.ci.low:+.4f}, "
        f"{n.ci.high:+.4f}]); base nDCG@10 {reference.mean_b:.4f}; best dev steps "
        + ", ".join(f"{arm} {np.median(v):.0f}" for arm, v in out["best_steps"].items())
    )
    return out


_COMMON = dict(
    eval_data=["nfcorpus", "scifact"],
    train_data="nfcorpus",
    temperature=0.01,
    hard_negatives=5,
    negative_skip=10,
    dev_queries=200,
    dev_corpus=1000,
    auc_negatives=500,
    ndcg_margin=0.02,
    converge_tol=0.002,
    n_boot=500,
)

CLAIM = Claim(
    id="001",
    paper="001",
    title="MW loss raises pooled ROC-AUC over InfoNCE at similar nDCG@10",
    statement=(
        "Training with the Mann–Whitney loss instead of contrastive InfoNCE improves the pooled AUC on every "
        "dataset while MRR/nDCG stay on par (paper 001 §5.2, Table 1)."
    ),
    paper_number="MiniLM in-distribution: AUC +0.13 to +0.14 (e.g. MS MARCO 0.67 → 0.81), nDCG 0.44 → 0.43",
    verdict_rule=(
        "the judged set is the profile's first evaluation set (cpu: NFCorpus test, in distribution; gpu: SciFact "
        "test, about one positive per query as in the paper's data, zero-shot); the other is reported. Gates: InfoNCE "
        "beats the untrained base on the judged set's nDCG@10 (whole 95% CI above 0) and both arms converged on "
        "NFCorpus dev (a dev peak after the first trained check and before the last, or a final plateau gaining "
        "≤ 0.002), else 'not reached at this budget'. Then on the judged set: reproduces if pooled AUC(MW) − "
        "AUC(InfoNCE) > 0 with the whole 95% CI above 0 AND nDCG@10(MW) − nDCG@10(InfoNCE) > −0.02 with the whole CI "
        "above −0.02; contradicts if either CI lies wholly on the wrong side; else inconclusive."
    ),
    revised=(
        "after the committed 5-seed cpu run: the verdict is taken on the profile's first evaluation set, so the gpu "
        "profile can judge SciFact (about one positive per query); the cpu profile's judged set and verdict are "
        "unchanged"
    ),
    profiles={
        "cpu": retrieval_profile(
            "bert-tiny",
            {"steps": 600},
            learning_rate=3e-5,
            batch_size=32,
            max_seq_length=64,
            training={"eval_every": 25, "patience": 6},
            **_COMMON,
        ),
        "gpu": retrieval_profile(
            "bert-tiny",
            {"steps": 3000},
            learning_rate=3e-5,
            batch_size=64,
            max_seq_length=128,
            training={"eval_every": 50, "patience": 8},
            **(_COMMON | {"eval_data": ["scifact", "nfcorpus"]}),
        ),
    },
    differences={
        "cpu": [
            f"base: {describe_model('bert-tiny')} (paper: MiniLM / XLM-R from foundation checkpoints)",
            "train: NFCorpus train, up to 600 steps × batch 32 with 5 base-mined hard negatives (ranks 11-15 of the "
            "non-positives), lr 3e-5 (the paper's best at batch 64, 001 App. B Table 3; at 1e-4 both arms peaked at "
            "the first dev check and then fell below the base), max_seq_length 64, early stopping on NFCorpus dev "
            "nDCG@10 (200 queries, 1,000 docs; every 25 steps, patience 6) (paper: NQ/NLI/SQuAD/MS MARCO, batch 64, "
            "up to 20 epochs, 500 warm-up steps)",
            "pooled AUC with the top 500 non-positives per query of the full NFCorpus and SciFact test corpora",
        ],
        "gpu": [
            "base: bert-tiny by default; pass --model <folder> (e.g. a MiniLM-L12 foundation checkpoint)",
            "train: NFCorpus train, up to 3,000 steps × batch 64 with 5 mined hard negatives, lr 3e-5, "
            "max_seq_length 128, early stopping on NFCorpus dev (every 50 steps, patience 8); full test corpora",
            "judged on SciFact test (about one positive per query, like the paper's MS MARCO / NQ; zero-shot from "
            "NFCorpus training), NFCorpus reported (paper: in distribution)",
        ],
    },
    can_establish={
        "cpu": "whether MW changes pooled AUC against InfoNCE at on-par nDCG@10 in the first ~100 steps of a small "
        "encoder's training (the dev optimum at this budget: step 75 in every seed and arm, 15 steps after warm-up; "
        "InfoNCE's dev score then falls below its step-0 value), on one in-domain and one zero-shot set; not the "
        "trained regime the paper reports (1-5K steps: the gpu profile), nor its multilingual or "
        "foundation-checkpoint results",
        "gpu": "whether MW raises pooled AUC against InfoNCE at on-par nDCG@10 after up to 3,000 steps (128 tokens), "
        "judged on a set with about one positive per query (SciFact, zero-shot from NFCorpus training); other bases "
        "only with --model",
    },
    run_seed=run_seed,
    decide=decide,
    judge=judge,
    dry_run={"steps": 3, "batch_size": 4, "max_seq_length": 16, "eval_every": 1, "patience": 2, "dev_queries": 6}
    | {"dev_corpus": 20, "auc_negatives": 5, "n_boot": 20, "eval_queries": 6, "eval_corpus": 20, "negative_skip": 1}
    | {"hard_negatives": 2},
)
