"""Exact-search evaluation wall time on a BEIR folder: ours / BEIR ``DenseRetrievalExactSearch`` (goal ≤ 1.0).

Both paths get the same model's *precomputed* embeddings (all-MiniLM-L6-v2 by default; encoded once with roles and
cached under runs/), so only search + scoring is timed:

* ours: :func:`st_magnitude.evaluation.exact_search` (chunked matmul + one ``topk`` per query chunk) +
  :func:`retrieval_metrics` (pytrec_eval via BEIR, MRR via ``evaluate_custom``);
* BEIR: ``EvaluateRetrieval(DenseRetrievalExactSearch(PrecomputedAdapter)).retrieve`` (its chunked scoring + Python
  heaps) + the same metric calls.

The metrics must be identical. Prints both times, the ratio, and the metrics side by side.

    nice .venv/bin/python benchmarks/bench_search.py --data ../shared/data/beir/scifact --threads 1
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import time
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main(argv=None) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default=os.path.join(here, "..", "..", "shared", "data", "beir", "scifact"))
    p.add_argument("--model", default=None)
    p.add_argument("--max-seq-length", type=int, default=None, help="token cap for the (cached) encoding")
    p.add_argument("--top-k", type=int, default=100)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--cache-dir", default=os.path.join(here, "..", "runs", "bench_cache"))
    p.add_argument(
        "--raw-embeddings",
        default=None,
        help="raw embeddings saved by eval_agreement.py --save-raw; scored as --similarity serves them",
    )
    p.add_argument("--similarity", default="cosine", help="with --raw-embeddings: the served similarity")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")

    import torch

    torch.set_num_threads(args.threads)
    sys.path.insert(0, os.path.join(here, "..", "tests"))
    from beir.retrieval.evaluation import EvaluateRetrieval
    from beir.retrieval.search.dense import DenseRetrievalExactSearch
    from conftest import minilm_path

    from st_magnitude.data.beir import doc_text, load_beir
    from st_magnitude.evaluation import encode_roles, exact_search
    from st_magnitude.evaluation.beir import PrecomputedAdapter
    from st_magnitude.evaluation.ir import retrieval_metrics
    from st_magnitude.model.load import load_model

    data = load_beir(args.data)
    model_path = args.model or str(minilm_path())
    qids, cids = list(data.queries), list(data.corpus)
    qtexts, dtexts = [data.queries[i] for i in qids], [doc_text(data.corpus[i]) for i in cids]
    key = hashlib.sha256(f"{model_path}|{args.max_seq_length}|{args.data}|{len(cids)}".encode()).hexdigest()[:12]
    cache = os.path.join(args.cache_dir, f"emb_{key}.pt")
    if args.raw_embeddings:
        from st_magnitude.similarity import get_similarity

        saved = torch.load(args.raw_embeddings)
        if saved["query_ids"] != qids or saved["corpus_ids"] != cids:
            raise ValueError("--raw-embeddings were computed for other ids/order than --data")
        sim = get_similarity(args.similarity)
        q, d = sim.transform_query(saved["q"]), sim.transform_document(saved["d"])
        print(f"embeddings: {args.raw_embeddings} served as {sim.name}")
    elif os.path.isfile(cache):
        q, d = torch.load(cache)
        print(f"embeddings: cached {cache}")
    else:
        t0 = time.perf_counter()
        model = load_model(model_path, max_seq_length=args.max_seq_length)
        q, d = encode_roles(model, qtexts, dtexts, batch_size=32)
        os.makedirs(args.cache_dir, exist_ok=True)
        torch.save((q, d), cache)
        print(f"embeddings: encoded in {time.perf_counter() - t0:.0f} s, cached to {cache}")
    print(f"data: {data!r}; top_k {args.top_k}; threads {args.threads}")

    def ours():
        res = exact_search(q, d, qids, cids, top_k=args.top_k)
        return retrieval_metrics(data.qrels, res)

    adapter = PrecomputedAdapter(dict(zip(qtexts, q)), dict(zip(dtexts, d)))

    def beir():
        dres = DenseRetrievalExactSearch(adapter, batch_size=128, show_progress_bar=False)
        res = EvaluateRetrieval(dres, k_values=[args.top_k], score_function="dot").retrieve(data.corpus, data.queries)
        return retrieval_metrics(data.qrels, res)

    times: dict[str, list[float]] = {"ours": [], "beir": []}
    metrics = {}
    for _ in range(args.repeats):
        for name, fn in (("ours", ours), ("beir", beir)):
            t0 = time.perf_counter()
            metrics[name] = fn()
            times[name].append(time.perf_counter() - t0)
    t_ours, t_beir = statistics.median(times["ours"]), statistics.median(times["beir"])
    print(f"\n{'':>10} {'median s':>9} " + " ".join(f"{k:>11}" for k in metrics["ours"]))
    for name, t in (("ours", t_ours), ("BEIR DRES", t_beir)):
        m = metrics["ours" if name == "ours" else "beir"]
        print(f"{name:>10} {t:>9.3f} " + " ".join(f"{v:>11.5f}" for v in m.values()))
    same = metrics["ours"] == metrics["beir"]
    print(f"\nratio ours / BEIR = {t_ours / t_beir:.3f} (goal <= 1.0); identical metrics: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
