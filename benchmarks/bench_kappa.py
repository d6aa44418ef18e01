"""Time the κ(F_qnorm) vs κ(F_dnorm) recommender on all-MiniLM-L6-v2, and sweep its verdict over pair counts.

Timing (default): ``run_kappa`` with its default budget of 8n pairs (3072 for n = 384) from SciFact/NFCorpus train,
including encoding; prints wall time and process CPU time. With ``--data .../nfcorpus --resamples 20 --seed 42`` it
is exactly the κ step of ``st-magnitude compare --quick`` (README "Results").

    .venv/bin/python benchmarks/bench_kappa.py --threads 2

Sweep (``--sweep N1,N2,...``): encodes every pair of the ``--data`` folders' train qrels once (raw model, 64 tokens,
exactly as ``run_kappa`` does), then for each N and ``--seeds`` seed draws the same pairs ``run_kappa`` would draw
and prints log10 κ of both sides, Δ, the half-sampling interval and the verdict as a markdown table
(docs/diagnostics.md "How many pairs"):

    .venv/bin/python benchmarks/bench_kappa.py --data ../shared/data/beir/nfcorpus \\
        --sweep 800,1000,1200,1500,2000,3000,3072,4000,6000 --seeds 42,43,44 --resamples 100 --threads 1
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def sweep(model, folders, sizes, seeds, resamples, max_seq_length) -> None:
    from st_magnitude.diagnostics.fim import kappa_min_pairs, recommend_normalization
    from st_magnitude.diagnostics.kappa_rule import embedding_dim, kappa_pair_pools, sample_kappa_pairs
    from st_magnitude.evaluation.ir import encode_roles
    from st_magnitude.model.load import raw_model

    raw = raw_model(model)
    raw.max_seq_length = min(max_seq_length, raw.max_seq_length or max_seq_length)
    dim = embedding_dim(raw)
    pools, used = kappa_pair_pools(folders, "train")
    uq = list(dict.fromkeys(p[0] for pool in pools for p in pool))
    ud = list(dict.fromkeys(p[1] for pool in pools for p in pool))
    t0 = time.perf_counter()
    q_emb, d_emb = encode_roles(raw, uq, ud, batch_size=32)
    qi = {t: i for i, t in enumerate(uq)}
    di = {t: i for i, t in enumerate(ud)}
    print(
        f"pool: {', '.join(f'{name} ({n} pairs)' for name, n in used)}; {len(uq)} queries + {len(ud)} documents "
        f"encoded once in {time.perf_counter() - t0:.1f} s ({max_seq_length} tokens); n = {dim}, minimum "
        f"{kappa_min_pairs(dim)} pairs (8n); {resamples} half-sample replicates"
    )
    print()
    print("| N | N/n | seed | log10 κ qnorm | log10 κ dnorm | Δ | 95 % interval (half-samples) | verdict |")
    print("|---|---|---|---|---|---|---|---|")
    for n_pairs in sizes:
        for seed in seeds:
            qs, ds, _ = sample_kappa_pairs(pools, used, n_pairs, seed)
            q = q_emb[[qi[t] for t in qs]]
            d = d_emb[[di[t] for t in ds]]
            res = recommend_normalization(q, d, n_bootstrap=resamples, seed=seed)
            ci = f"[{res.ci_low:+.4f}, {res.ci_high:+.4f}]" if res.ci_low is not None else "—"
            verdict = (
                f"**{res.recommendation}**, confident"
                if res.confident
                else "inconclusive (N < 8n)"
                if res.n_pairs < res.min_pairs
                else f"inconclusive ({res.reason})"
            )
            print(
                f"| {res.n_pairs} | {res.n_pairs / dim:.2f} | {seed} | {res.log10_kappa_qnorm:.4f} | "
                f"{res.log10_kappa_dnorm:.4f} | {res.delta:+.4f} | {ci} | {verdict} |",
                flush=True,
            )


def main(argv=None) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--data",
        nargs="+",
        default=[os.path.join(here, "..", "..", "shared", "data", "beir", n) for n in ("scifact", "nfcorpus")],
    )
    p.add_argument("--model", default=None)
    p.add_argument("--n-pairs", type=int, default=None, help="pairs (default: 8n, run_kappa's default)")
    p.add_argument("--resamples", "--bootstrap", dest="resamples", type=int, default=100, help="half-samples")
    p.add_argument("--max-seq-length", type=int, default=64, help="token cap for the pairs (diagnose's default)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--sweep", type=_ints, default=None, help="comma-separated pair counts: print the verdict table")
    p.add_argument("--seeds", type=_ints, default=[42, 43, 44], help="sampling/resampling seeds for --sweep")
    p.add_argument("--seed", type=int, default=0, help="pair-sampling/resampling seed of the timed run")
    args = p.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    sys.path.insert(0, os.path.join(here, "..", "tests"))
    from conftest import minilm_path

    from st_magnitude.diagnostics.kappa_rule import run_kappa
    from st_magnitude.model.load import load_model

    t0 = time.perf_counter()
    model = load_model(args.model or str(minilm_path()), max_seq_length=args.max_seq_length)
    t_load = time.perf_counter() - t0
    if args.sweep:
        sweep(model, args.data, args.sweep, args.seeds, args.resamples, args.max_seq_length)
        return 0
    cpu0 = time.process_time()
    res, sec, source = run_kappa(
        model,
        args.data,
        n_pairs=args.n_pairs,
        n_bootstrap=args.resamples,
        seed=args.seed,
        max_seq_length=args.max_seq_length,
    )
    cpu = time.process_time() - cpu0
    print(f"pairs: {source}; max_seq_length {args.max_seq_length}; threads {args.threads}")
    print(
        f"model load {t_load:.1f} s; pairs + encoding + κ + {args.resamples} half-sample replicates: {sec:.1f} s "
        f"wall, {cpu:.1f} s CPU (all threads; on {args.threads} free cores ≈ {cpu / args.threads:.1f} s wall)"
    )
    print(res.summary())
    verdict = "met" if sec < 60 else "not met on this (possibly shared) machine"
    print(
        f"goal < 60 s on 2 cores: wall {sec:.1f} s ({verdict}); work = {cpu:.1f} CPU-s, i.e. about "
        f"{cpu / 2:.1f} s on 2 idle cores with ideal 2-thread scaling "
        "(use --threads 1 on a busy machine: OpenMP spin-waits inflate CPU time)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
