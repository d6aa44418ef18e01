"""Exact search at 10k–1M (and 10M on disk) documents: ours / plain torch, time and peak RSS (goal ≤ 1.0, ≤ 1.2).

Random 384-d float32 embeddings (seeded), 300 queries, top-100:

* ours: :func:`st_magnitude.evaluation.exact_search` (ids in, ``{qid: {doc_id: score}}`` out, the query's own id
  skipped as by default, i.e. top-101 searched);
* plain torch: ``q @ chunk.T`` + ``torch.topk`` per 50k-document chunk, then one ``topk`` over the candidates
  (tensors out, no ids).

Per size, one subprocess times both alternately (medians of ``--repeats``, same process, so contention hits both)
and checks that the top-100 document lists are identical; two more subprocesses run each method once on their own
and report the peak RSS increase over the data (VmHWM reset after the embeddings and ids exist, so only what the
search allocates counts). ``--disk-sizes`` runs the same comparison on a ``.npy`` file of that many documents
(written once under ``--disk-dir``, float16 by default): ours reads it with :class:`EmbeddingStore` (plain reads,
fixed buffers), plain torch slices ``numpy.load(mmap_mode="r")`` in 50k chunks; there the RSS column includes
file-backed pages of the memmap (reported separately as anon / file).

    nice -n 5 .venv/bin/python benchmarks/bench_scale.py --threads 2                       # 10k, 100k, 1M
    nice -n 5 .venv/bin/python benchmarks/bench_scale.py --sizes --disk-sizes 10000000      # 10M on disk
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]


def status_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{key} not in /proc/self/status")


def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS


def make_data(n_docs: int, n_queries: int, dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(n_queries, dim, generator=g)
    d = torch.empty(n_docs, dim)
    for s in range(0, n_docs, 1 << 18):
        d[s : s + (1 << 18)] = torch.randn(min(1 << 18, n_docs - s), dim, generator=g)
    return q, d


def disk_file(args, n_docs: int) -> Path:
    """A seeded ``.npy`` of ``n_docs`` rows under ``--disk-dir`` (written once, in blocks)."""
    path = Path(args.disk_dir) / f"scale_{n_docs}x{args.dim}_{args.disk_dtype}_s{args.seed}.npy"
    done = path.with_name(path.name + ".done")
    if done.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    mm = np.lib.format.open_memmap(path, mode="w+", dtype=np.dtype(args.disk_dtype), shape=(n_docs, args.dim))
    g = torch.Generator().manual_seed(args.seed + 1)
    block = 1 << 18
    t0 = time.perf_counter()
    for s in range(0, n_docs, block):
        mm[s : s + block] = torch.randn(min(block, n_docs - s), args.dim, generator=g).numpy()
    mm.flush()
    del mm
    done.write_text("ok")
    print(f"wrote {path} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return path


def plain_torch(q: torch.Tensor, corpus, k: int, chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The baseline: matmul + topk per corpus chunk, one topk over the candidates."""
    vals, idx = [], []
    n = corpus.shape[0]
    for s in range(0, n, chunk):
        part = corpus[s : s + chunk]
        if isinstance(part, np.ndarray):
            part = torch.from_numpy(part).float()
        scores = q @ part.T
        v, i = torch.topk(scores, min(k, scores.shape[1]), dim=1)
        vals.append(v)
        idx.append(i + s)
    v, i = torch.cat(vals, 1), torch.cat(idx, 1)
    top, pos = torch.topk(v, min(k, v.shape[1]), dim=1)
    return top, i.gather(1, pos)


def child(args) -> None:
    from st_magnitude.evaluation import exact_search
    from st_magnitude.evaluation.embeddings_store import EmbeddingStore

    torch.set_num_threads(args.threads)
    n = args.child_size
    if args.child_disk:
        path = disk_file(args, n)
        g = torch.Generator().manual_seed(args.seed)
        q = torch.randn(args.queries, args.dim, generator=g)
        ours_corpus, torch_corpus = EmbeddingStore(path), np.load(path, mmap_mode="r")
    else:
        q, d = make_data(n, args.queries, args.dim, args.seed)
        ours_corpus = torch_corpus = d
    qids = [f"q{i}" for i in range(args.queries)]
    cids = [f"d{j}" for j in range(n)]
    k = args.top_k

    def ours():
        return exact_search(q, ours_corpus, qids, cids, top_k=k)

    def base():
        return plain_torch(q, torch_corpus, k, args.baseline_chunk)

    gc.collect()
    rss0 = status_kib("VmRSS")
    out: dict = {"size": n, "disk": bool(args.child_disk), "rss_data_mib": rss0 / 1024}
    if args.child_mode in ("ours", "torch"):
        fn = ours if args.child_mode == "ours" else base
        anon0, file0 = status_kib("RssAnon"), status_kib("RssFile")
        reset_peak()
        t0 = time.perf_counter()
        fn()
        out["seconds"] = time.perf_counter() - t0
        out["peak_increase_mib"] = (status_kib("VmHWM") - rss0) / 1024
        out["anon_increase_mib"] = (status_kib("RssAnon") - anon0) / 1024
        out["file_increase_mib"] = (status_kib("RssFile") - file0) / 1024
        print(json.dumps(out))
        return
    times: dict[str, list[float]] = {"ours": [], "torch": []}
    res_ours = res_base = None
    for _ in range(args.repeats):
        for name, fn in (("torch", base), ("ours", ours)):
            t0 = time.perf_counter()
            r = fn()
            times[name].append(time.perf_counter() - t0)
            if name == "ours":
                res_ours = r
            else:
                res_base = r
    top_v, top_i = res_base
    same_sets = same_order = True
    max_diff = 0.0
    for row, qid in enumerate(qids):
        mine = sorted(res_ours[qid].items(), key=lambda x: (-x[1], int(x[0][1:])))
        ref = [f"d{j}" for j in top_i[row].tolist()]
        same_sets &= {c for c, _ in mine} == set(ref)
        same_order &= [c for c, _ in mine] == ref
        max_diff = max(max_diff, max(abs(res_ours[qid].get(c, float("inf")) - v) for c, v in zip(ref, top_v[row])))
    out.update(
        ours_s=statistics.median(times["ours"]),
        torch_s=statistics.median(times["torch"]),
        ours_all=times["ours"],
        torch_all=times["torch"],
        identical_sets=bool(same_sets),
        identical_order=bool(same_order),
        max_score_diff=float(max_diff),
        load=os.getloadavg()[0],
    )
    print(json.dumps(out))


def run_child(args, size: int, mode: str, disk: bool) -> dict:
    cmd = [sys.executable, __file__, "--_child-size", str(size), "--_child-mode", mode]
    cmd += ["--threads", str(args.threads), "--repeats", str(args.repeats), "--queries", str(args.queries)]
    cmd += ["--dim", str(args.dim), "--top-k", str(args.top_k), "--seed", str(args.seed)]
    cmd += ["--baseline-chunk", str(args.baseline_chunk)]
    if disk:
        cmd += ["--_child-disk", "--disk-dir", args.disk_dir, "--disk-dtype", args.disk_dtype]
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"child {size} {mode} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000, 1_000_000])
    p.add_argument("--disk-sizes", type=int, nargs="*", default=[])
    p.add_argument("--disk-dir", default=str(REPO / "runs" / "bench_scale"))
    p.add_argument("--disk-dtype", choices=["float16", "float32"], default="float16")
    p.add_argument("--queries", type=int, default=300)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--top-k", type=int, default=100)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--baseline-chunk", type=int, default=50_000)
    p.add_argument("--_child-size", dest="child_size", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--_child-mode", dest="child_mode", default=None, help=argparse.SUPPRESS)
    p.add_argument("--_child-disk", dest="child_disk", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child_size is not None:
        child(args)
        return 0

    print(
        f"random {args.dim}-d float32 embeddings, {args.queries} queries, top-{args.top_k}, threads {args.threads}, "
        f"median of {args.repeats}; load average at start {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
    )
    rows = []
    jobs = [(n, False) for n in args.sizes] + [(n, True) for n in args.disk_sizes]
    for n, disk in jobs:
        t = run_child(args, n, "time", disk)
        ro, rt = run_child(args, n, "ours", disk), run_child(args, n, "torch", disk)
        rows.append((n, disk, t, ro, rt))
        print(f"  {n:>10,} docs{' (disk)' if disk else ''}: {json.dumps(t)}", flush=True)
        print(f"  {'':>10}  rss ours {json.dumps(ro)}\n  {'':>10}  rss torch {json.dumps(rt)}", flush=True)
    print()
    print(
        "| docs | ours s | plain torch s | ratio (goal ≤ 1.0) | ours ΔRSS MiB | torch ΔRSS MiB "
        "| RSS ratio (goal ≤ 1.2) | identical top-k | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    ok = True
    for n, disk, t, ro, rt in rows:
        ratio = t["ours_s"] / t["torch_s"]
        rss_ratio = ro["peak_increase_mib"] / max(rt["peak_increase_mib"], 1e-9)
        label = f"{n:,}" + (f" ({args.disk_dtype} .npy on disk)" if disk else "")
        same = "yes" if t["identical_sets"] else "NO"
        same += "" if t["identical_order"] else " (sets; order differs at equal scores)"
        print(
            f"| {label} | {t['ours_s']:.3f} | {t['torch_s']:.3f} | {ratio:.3f} | {ro['peak_increase_mib']:.0f} | "
            f"{rt['peak_increase_mib']:.0f} | {rss_ratio:.2f} | {same} | {t['load']:.1f} |"
        )
        ok &= t["identical_sets"]
        if n >= 1_000_000 and not disk:
            print(f"ratio ours / plain torch at {n:,} = {ratio:.3f} (goal <= 1.0); RSS ratio {rss_ratio:.2f} (<= 1.2)")
    for n, disk, t, ro, rt in rows:
        if disk:
            print(
                f"disk {n:,}: ours {ro['seconds']:.1f} s, peak ΔRSS {ro['peak_increase_mib']:.0f} MiB "
                f"(anon {ro['anon_increase_mib']:.0f}, file {ro['file_increase_mib']:.0f}); plain torch on memmap "
                f"{rt['seconds']:.1f} s, peak ΔRSS {rt['peak_increase_mib']:.0f} MiB "
                f"(anon {rt['anon_increase_mib']:.0f}, file {rt['file_increase_mib']:.0f})"
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
