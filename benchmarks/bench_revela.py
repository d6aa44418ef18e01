"""Step time of RevelaLoss vs a plain causal-LM forward+backward on the same chunks (goal: ratio ≤ 2.2).

Revela needs two LM passes (pass 1 records K/V, pass 2 adds the in-batch term in every layer), so ~2× a plain step
is the floor; the in-batch attention itself is B·(B-1) extra attention blocks per layer.

Both sides run the same LM on the same ``[B, L]`` token batch (right padding on some rows), with backward:

* plain:  ``lm(ids, mask, labels).loss.backward()``
* revela: ``RevelaLoss.compute_loss_from_embeddings(q, p, ids, mask).backward()`` with leaf retriever
  embeddings ``q, p`` (requires_grad) — i.e. RevelaLoss without the retriever's own encoder cost, which any
  retriever loss pays too.

Weights are random (timing does not depend on them), so ``--arch smollm2`` needs no download: it builds a Llama
with SmolLM2-135M's shape (30 layers, hidden 576, 9 heads / 3 KV heads, vocab 49152).

    python benchmarks/bench_revela.py --arch tiny
    python benchmarks/bench_revela.py --arch smollm2 --batch 8 --length 128 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

ARCHS = {
    "tiny": dict(
        vocab_size=1000,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
    ),
    "smollm2": dict(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        tie_word_embeddings=True,
        rope_theta=100000.0,
    ),
}


def build_lm(arch: str, device: str, dtype: torch.dtype):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(max_position_embeddings=2048, attn_implementation="sdpa", **ARCHS[arch])
    return LlamaForCausalLM(config).to(device=device, dtype=dtype).train()


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn, device: str, repeats: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


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
    args = parser.parse_args(argv)
    if args.batch < 3:
        raise ValueError(f"--batch must be >= 3 (RevelaLoss needs B >= 3); got {args.batch}")
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)

    from st_magnitude.losses.revela import RevelaLoss

    lm = build_lm(args.arch, args.device, dtype)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, lm.config.vocab_size, (args.batch, args.length), generator=g)
    mask = torch.ones_like(ids)
    mask[1::3, -args.length // 4 :] = 0  # some right padding, as in real batches
    ids, mask = ids.to(args.device), mask.to(args.device)
    labels = ids.masked_fill(mask == 0, -100)
    q = torch.randn(args.batch, 384, device=args.device, requires_grad=True)
    p = torch.randn(args.batch, 384, device=args.device, requires_grad=True)

    def plain_step():
        lm.zero_grad(set_to_none=True)
        lm(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()

    plain_s = timed(plain_step, args.device, args.repeats, args.warmup)  # before the switch: stock "sdpa"
    loss = RevelaLoss(None, lm, temperature=0.05, v_norm=not args.no_v_norm)

    def revela_step():
        lm.zero_grad(set_to_none=True)
        q.grad = p.grad = None
        loss.compute_loss_from_embeddings(q, p, ids, mask).backward()

    revela_s = timed(revela_step, args.device, args.repeats, args.warmup)
    loss.cache_grad = False
    revela_nocache_s = timed(revela_step, args.device, args.repeats, args.warmup)
    loss.cache_grad = True
    plain_after_s = timed(plain_step, args.device, args.repeats, args.warmup)  # the switched LM, no Revela state
    import transformers

    print(
        f"arch={args.arch} B={args.batch} L={args.length} device={args.device} dtype={args.dtype} "
        f"threads={args.threads} v_norm={not args.no_v_norm} transformers={transformers.__version__}"
    )
    print(f"{'':34s}{'seconds/step':>14s}")
    print(f"{'plain causal LM fwd+bwd (sdpa)':34s}{plain_s:14.4f}")
    print(f"{'plain, LM switched to revela_sdpa':34s}{plain_after_s:14.4f}")
    print(f"{'RevelaLoss fwd+bwd (2 passes)':34s}{revela_s:14.4f}")
    print(f"{'RevelaLoss, cache_grad=False':34s}{revela_nocache_s:14.4f}")
    ratio = revela_s / plain_s
    print(f"ratio RevelaLoss / plain = {ratio:.2f}  (goal <= 2.2: {'met' if ratio <= 2.2 else 'NOT met'})")
    print(f"ratio RevelaLoss(cache_grad=False) / plain = {revela_nocache_s / plain_s:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
