"""GPU benchmark, ours against sentence-transformers and plain torch side by side in one run, results in one JSON.

Sections (each measured in this one process, ours and the baseline alternating, so the same GPU state hits both):

* ``step``: one training step (forward, loss, backward, AdamW step) on pre-tokenized real-length batches, time and
  peak GPU memory, of PartialNormInfoNCE / MW / L2Dir (cosine) and their cached twins against ST's MNRL / CMNRL:
  all-MiniLM-L6-v2 at batch 256 and an mpnet-base-sized model at batch 64, fp32 and bf16 (autocast, as the Trainer's
  ``bf16=True``); and CachedMW against CMNRL at batch 1,024 and 4,096 (MiniLM, bf16, mini-batch 32;
  ``sec_big_batch.py``). Goal: ours / baseline ≤ 1.03 in time and memory.
* ``syncs``: host syncs in one steady-state step (``torch.cuda.set_sync_debug_mode("warn")``, counted warnings; the
  step after the calls that run the first calls' duplicate check) in the loss alone on fixed embeddings (goal: the
  loss's declared ``host_reads_per_step``, 0 for most) and in the whole step (the model's own syncs counted there
  too, MNRL beside ours); ``sec_syncs.py``.
* ``mw_pairs``: MW's grid vs every-pair stage, loss + backward, B = 64 … 4,096, H = 0, 1 (``sec_mw_pairs.py``).
* ``trainer``: steps/s of ``st-magnitude compare --full`` (bounded ``--steps``, qnorm, InfoNCE) against a plain ST
  Trainer with MNRL on the same pairs, settings and checkpoint interval.
* ``encode``: documents/s of ``encode_document`` through a qnorm model (Router) against the plain ST model's
  ``encode``, on real-length texts, fp16, with the tokenizer serial and parallel (``sec_encode.py``).
* ``search``: exact top-100 search over 1M random 384-d fp16 documents on the GPU, ours (``exact_search``: ids in,
  dicts out) against plain torch doing the same work (matmul + ``topk`` per chunk in fp16 with float32 accumulation,
  then the same dicts); the top-100 sets are checked equal up to ties at the 100th score (``sec_search.py``).

The mpnet model is built from its configuration with random weights (step time and memory do not depend on them;
the output says so), with MiniLM's tokenizer. MiniLM travels in fp16 (``prepare.sh``), converted to fp32 at start.

    bash benchmarks/gpu/run.sh                          # on the GPU machine, from the repository root
    python benchmarks/gpu/bench.py --dry-run --out /tmp/gpu.json    # CPU, tiny sizes, the same code path (seconds)
    python benchmarks/gpu/render.py /tmp/gpu.json       # the generated section of docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from sec_big_batch import big_batch_rows  # noqa: E402
from sec_encode import section_encode  # noqa: E402
from sec_mw_pairs import section_mw_pairs  # noqa: E402
from sec_search import section_search  # noqa: E402
from sec_syncs import section_syncs  # noqa: E402

REPO = HERE.parents[1]
CARRY = HERE / ".carry"
SECTIONS = ("step", "syncs", "mw_pairs", "trainer", "encode", "search")

#: real and dry-run sizes; the dry run only checks the code path
SIZES = {
    "real": {
        "models": {"minilm": 256, "mpnet": 64},  # model -> batch
        "dtypes": ("fp32", "bf16"),
        "steps": 5,
        "rounds": 3,
        "warmup": 2,
        "big_batches": (1024, 4096),  # CachedMW / CMNRL rows (MiniLM, bf16): 1 warm-up, then 2 rounds of 1 step
        "big_step_limit_s": 40,
        "trainer_steps": 60,
        "encode_docs": 5183,
        "encode_rounds": 2,
        "encode_batch": 256,
        "search_docs": 1_000_000,
        "mw_batches": (64, 128, 256, 512, 1024, 2048, 4096),  # MW grid vs pairwise (sec_mw_pairs.py)
        "mw_pairwise_max_pairs": 2**35,
        "search_queries": 1000,
        "search_dim": 384,
    },
    "dry": {
        "models": {"minilm": 8, "mpnet": 4},
        "dtypes": ("fp32", "bf16"),
        "steps": 1,
        "rounds": 1,
        "warmup": 1,
        "big_batches": (16,),
        "big_step_limit_s": 60,
        "trainer_steps": 2,
        "encode_docs": 24,
        "encode_rounds": 1,
        "encode_batch": 8,
        "search_docs": 5000,
        "mw_batches": (8, 16),
        "mw_pairwise_max_pairs": 2**12,
        "search_queries": 16,
        "search_dim": 32,
    },
}

#: our loss -> the ST baseline it is measured against
PAIRS = {
    "PartialNormInfoNCE": "MNRL",
    "MW": "MNRL",
    "L2Dir": "MNRL",
    "CachedPartialNormInfoNCE": "CMNRL",
    "CachedMW": "CMNRL",
    "CachedL2Dir": "CMNRL",
}
MINI_BATCH = 32  # the cached losses' mini-batch (ST's default)


def log(msg: str) -> None:
    print(msg, flush=True)


# ----------------------------------------------------------------------------------------------------------------
# models and data
# ----------------------------------------------------------------------------------------------------------------
def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def beir_texts(data: Path, n_docs: int) -> tuple[list[str], list[str], list[str]]:
    """(queries, their relevant documents, corpus documents) of a BEIR folder, real lengths, file order."""
    docs: dict[str, str] = {}
    with open(data / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            d = json.loads(line)
            docs[d["_id"]] = (d.get("title", "") + " " + d.get("text", "")).strip()
    queries: dict[str, str] = {}
    with open(data / "queries.jsonl", encoding="utf-8") as fh:
        for line in fh:
            q = json.loads(line)
            queries[q["_id"]] = q["text"]
    split = next(s for s in ("train", "dev", "test") if (data / "qrels" / f"{s}.tsv").is_file())
    anchors, positives, seen = [], [], set()
    with open(data / "qrels" / f"{split}.tsv", encoding="utf-8") as fh:
        for line in fh:
            parts = line.strip().split("\t")
            if len(parts) < 3 or not parts[2].lstrip("-").isdigit() or int(parts[2]) <= 0:
                continue
            qid, did = parts[0], parts[1]
            if qid in queries and did in docs and qid not in seen:  # one pair per query: no duplicate anchors
                seen.add(qid)
                anchors.append(queries[qid])
                positives.append(docs[did])
    return anchors, positives, list(docs.values())[:n_docs]


def st_model(hf_dir: Path, max_seq_length: int, device: str):
    """Transformer + mean Pooling + Normalize (all-MiniLM-L6-v2's and all-mpnet-base-v2's layout)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    transformer = Transformer(str(hf_dir), max_seq_length=max_seq_length)
    pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode="mean")
    return SentenceTransformer(modules=[transformer, pooling, Normalize()], device=device)


def build_models(args, work: Path) -> dict[str, dict]:
    """{"minilm": {...}, "mpnet": {...}}: an fp32 ST model folder each, with how it was made."""
    from transformers import AutoTokenizer, BertConfig, BertModel, MPNetConfig, MPNetModel

    out: dict[str, dict] = {}
    if args.dry_run:
        sys.path.insert(0, str(REPO / "tests"))
        from conftest import build_tokenizer

        tokenizer = build_tokenizer()
        torch.manual_seed(0)
        bert = BertModel(
            BertConfig(
                vocab_size=len(tokenizer),
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=4,
                intermediate_size=64,
                max_position_embeddings=128,
                pad_token_id=tokenizer.pad_token_id,
            )
        )
        minilm_src, minilm_note, seq = work / "minilm-hf", "tiny random BERT (dry run)", 32
        bert.save_pretrained(minilm_src)
        tokenizer.save_pretrained(minilm_src)
        mpnet_cfg = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
        mpnet_seq = 32
    else:
        src = Path(args.carry) / "minilm"
        if not (src / "config.json").is_file():
            raise FileNotFoundError(f"{src} is missing: run `bash benchmarks/gpu/prepare.sh` where pip works")
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(src), device="cpu")  # fp16 on disk
        model.float()
        minilm_dir = work / "minilm-fp32"
        model.save(str(minilm_dir))  # fp32 on disk: every later load (the compare run too) is fp32
        out["minilm"] = {
            "path": minilm_dir,
            "note": "all-MiniLM-L6-v2, weights stored fp16, loaded as fp32",
            "max_seq_length": model.max_seq_length,
        }
        tokenizer = AutoTokenizer.from_pretrained(str(src))
        mpnet_cfg = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
        mpnet_seq = 384  # all-mpnet-base-v2's max_seq_length
    if args.dry_run:
        out["minilm"] = {"path": None, "hf": minilm_src, "note": minilm_note, "max_seq_length": seq}
    torch.manual_seed(0)
    mpnet = MPNetModel(
        MPNetConfig(
            vocab_size=max(30527, len(tokenizer)),
            max_position_embeddings=514,
            pad_token_id=tokenizer.pad_token_id,
            **mpnet_cfg,
        )
    )
    mpnet_hf = work / "mpnet-hf"
    mpnet.save_pretrained(mpnet_hf)
    tokenizer.save_pretrained(mpnet_hf)
    out["mpnet"] = {
        "path": None,
        "hf": mpnet_hf,
        "note": (
            "mpnet-base configuration (all-mpnet-base-v2: 12 layers, hidden 768), RANDOM weights, MiniLM's tokenizer"
            if not args.dry_run
            else "tiny random MPNet (dry run)"
        ),
        "max_seq_length": mpnet_seq,
    }
    return out


def load_st(info: dict, device: str):
    from sentence_transformers import SentenceTransformer

    if info.get("path") is not None:
        return SentenceTransformer(str(info["path"]), device=device)
    return st_model(info["hf"], info["max_seq_length"], device)


def make_loss(name: str, model):
    from sentence_transformers.sentence_transformer.losses import (
        CachedMultipleNegativesRankingLoss,
        MultipleNegativesRankingLoss,
    )

    from st_magnitude import losses as L

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {
            "MNRL": lambda: MultipleNegativesRankingLoss(model, scale=20.0),
            "CMNRL": lambda: CachedMultipleNegativesRankingLoss(model, scale=20.0, mini_batch_size=MINI_BATCH),
            "PartialNormInfoNCE": lambda: L.PartialNormInfoNCELoss(model, similarity="cosine", scale=20.0),
            "CachedPartialNormInfoNCE": lambda: L.CachedPartialNormInfoNCELoss(
                model, similarity="cosine", scale=20.0, mini_batch_size=MINI_BATCH
            ),
            "MW": lambda: L.MWLoss(model, similarity="cosine"),
            "CachedMW": lambda: L.CachedMWLoss(model, similarity="cosine", mini_batch_size=MINI_BATCH),
            "L2Dir": lambda: L.L2DirLoss(model),
            "CachedL2Dir": lambda: L.CachedL2DirLoss(model, mini_batch_size=MINI_BATCH),
        }[name]()


def batches(model, anchors: list[str], positives: list[str], batch: int, n: int, device: str) -> list[tuple]:
    """``n`` pre-tokenized (anchor features, positive features) batches, cycling through the pairs."""
    out = []
    for i in range(n):
        s = (i * batch) % max(1, len(anchors) - batch)
        q = _features(model, anchors[s : s + batch])
        d = _features(model, positives[s : s + batch])
        out.append((_to(q, device), _to(d, device)))
    return out


def _features(model, texts: list[str]) -> dict:
    prep = getattr(model, "preprocess", None) or model.tokenize  # ST 6.2 renamed tokenize to preprocess
    return prep(texts)


def _to(features: dict, device: str) -> dict:
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in features.items()}


def autocast(dtype: str, device: str):
    if dtype == "bf16":
        return torch.autocast(device_type="cuda" if device.startswith("cuda") else "cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


# ----------------------------------------------------------------------------------------------------------------
# sections
# ----------------------------------------------------------------------------------------------------------------
def section_step(args, ctx) -> list[dict]:
    sizes, device = ctx["sizes"], ctx["device"]
    rows = []
    for model_name, batch in sizes["models"].items():
        info = ctx["models"][model_name]
        model = load_st(info, device)
        model.max_seq_length = info["max_seq_length"]
        data = batches(model, ctx["anchors"], ctx["positives"], batch, 4, device)
        labels = torch.zeros(batch, device=device)
        losses = {name: make_loss(name, model) for name in ("MNRL", "CMNRL", *PAIRS)}
        params = [p for loss in losses.values() for p in loss.parameters()]
        unique = list({id(p): p for p in params}.values())
        optimizer = torch.optim.AdamW(unique, lr=1e-8)  # tiny lr: the weights barely move between measured losses
        for dtype in sizes["dtypes"]:
            res = {name: {"times": [], "peaks": [], "step_peaks": []} for name in losses}
            errors: dict[str, str] = {}

            def one(name: str, i: int) -> None:
                q, d = data[i % len(data)]
                optimizer.zero_grad(set_to_none=True)
                with autocast(dtype, device):
                    loss_value = losses[name]([q, d], labels)
                    if isinstance(loss_value, dict):
                        loss_value = sum(loss_value.values())
                loss_value.backward()
                optimizer.step()

            for name in losses:  # warm-up: allocator, kernels, optimizer state
                try:
                    for i in range(sizes["warmup"]):
                        one(name, i)
                except Exception as exc:  # noqa: BLE001 - recorded in the JSON, the other losses go on
                    errors[name] = f"{type(exc).__name__}: {exc}"[:300]
            sync(device)
            for _ in range(sizes["rounds"]):  # alternate, so drift hits every loss alike
                for name in losses:
                    if name in errors:
                        continue
                    if device.startswith("cuda"):
                        torch.cuda.synchronize()
                        base = torch.cuda.memory_allocated()
                        torch.cuda.reset_peak_memory_stats()
                    t0 = time.perf_counter()
                    for i in range(sizes["steps"]):
                        one(name, i)
                    sync(device)
                    res[name]["times"].append((time.perf_counter() - t0) / sizes["steps"])
                    if device.startswith("cuda"):
                        peak = torch.cuda.max_memory_allocated()
                        res[name]["peaks"].append(peak)
                        res[name]["step_peaks"].append(peak - base)
            for name, r in res.items():
                row = {"model": model_name, "batch": batch, "dtype": dtype, "loss": name}
                if name in errors:
                    row["error"] = errors[name]
                else:
                    row["ms"] = statistics.median(r["times"]) * 1e3
                    row["peak_mib"] = max(r["peaks"]) / 2**20 if r["peaks"] else None
                    row["step_peak_mib"] = max(r["step_peaks"]) / 2**20 if r["step_peaks"] else None
                rows.append(row)
            log(f"step {model_name} batch {batch} {dtype}: " + ", ".join(_step_cell(r) for r in rows[-len(res) :]))
        model = losses = optimizer = data = None  # freed before the next model is measured
        _free(device)
    rows += big_batch_rows(ctx, sync, _free, log, load_st, make_loss, autocast, _features, _to)
    for row in rows:
        base = PAIRS.get(row["loss"])
        ref = next((r for r in rows if r["loss"] == base and _same_setting(r, row)), None)
        if base and ref and "ms" in row and "ms" in ref:
            row["baseline"] = base
            row["time_ratio"] = row["ms"] / ref["ms"]
            if row.get("peak_mib") and ref.get("peak_mib"):
                row["memory_ratio"] = row["peak_mib"] / ref["peak_mib"]
    return rows


def _step_cell(r: dict) -> str:
    return f"{r['loss']} error" if "error" in r else f"{r['loss']} {r['ms']:.1f} ms"


def _same_setting(a: dict, b: dict) -> bool:
    return all(a[k] == b[k] for k in ("model", "batch", "dtype"))


def _free(device: str) -> None:
    import gc

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def section_trainer(args, ctx) -> dict:
    """compare --full (bounded steps) against a plain ST Trainer with MNRL on the same pairs and settings."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.base.sampler import BatchSamplers
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from transformers import TrainerCallback

    from st_magnitude.cli import main as cli_main
    from st_magnitude.lab.compare.config import PROFILES
    from st_magnitude.lab.engine.data import training_pairs

    device, sizes, work = ctx["device"], ctx["sizes"], ctx["work"]
    full = PROFILES["full"]
    steps = sizes["trainer_steps"]
    batch = full["batch_size"] if not args.dry_run else 4
    seq = full["max_seq_length"] if not args.dry_run else 32
    save_steps = max(10, steps // 5)
    info = ctx["models"]["minilm"]
    model_src = info["path"]
    if model_src is None:  # dry run: save the tiny model as an ST folder compare can load
        model_src = work / "minilm-st"
        load_st(info, "cpu").save(str(model_src))
    train = Path(args.data) / ctx["train_name"]
    eval_name = ctx["eval_name"]
    out_dir = work / "compare-full"
    cmd = ["compare", "--full", "--steps", str(steps), "--variants", "qnorm", "--loss", "infonce", "--no-kappa"]
    cmd += ["--model", str(model_src), "--train-data", str(train), "--eval-data", str(Path(args.data) / eval_name)]
    corpus, queries = (2000, 100) if not args.dry_run else (40, 8)
    cmd += ["--max-corpus", str(corpus), "--max-queries", str(queries), "--save-steps", str(save_steps)]
    cmd += ["--output", str(out_dir), "--device", device]
    if args.dry_run:
        cmd += ["--batch-size", str(batch), "--max-seq-length", str(seq)]
    t0 = time.perf_counter()
    rc = cli_main(cmd)
    compare_wall = time.perf_counter() - t0
    if rc != 0:
        raise RuntimeError(f"st-magnitude {' '.join(cmd)} exited {rc}")
    trained = json.loads((out_dir / "runs" / "qnorm-infonce" / "train.json").read_text())

    # the plain baseline: the same pairs (compare's own sampling of them), settings and checkpoint interval
    pairs = training_pairs(train, steps * batch, 42)
    n = steps * batch
    data = Dataset.from_dict({"anchor": pairs["anchor"][: n * 2], "positive": pairs["positive"][: n * 2]})
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(model_src), device=device)
    model.max_seq_length = seq
    targs = SentenceTransformerTrainingArguments(
        output_dir=str(work / "plain-st"),
        max_steps=steps,
        per_device_train_batch_size=batch,
        learning_rate=full["learning_rate"],
        lr_scheduler_type=full["lr_scheduler"],
        weight_decay=full["weight_decay"],
        adam_beta2=full["adam_beta2"],
        max_grad_norm=1.0,
        seed=42,
        data_seed=42,
        batch_sampler=BatchSamplers.NO_DUPLICATES,
        save_strategy="steps",
        save_steps=save_steps,
        save_total_limit=1,
        report_to=[],
        use_cpu=device == "cpu",
        dataloader_drop_last=True,
        logging_steps=max(1, steps // 10),
    )
    clock: dict[str, float] = {}

    class Clock(TrainerCallback):
        def on_train_begin(self, *a, **k):
            clock["t0"] = time.perf_counter()

        def on_train_end(self, *a, **k):
            clock["t1"] = time.perf_counter()

    trainer = SentenceTransformerTrainer(
        model=model, args=targs, train_dataset=data, loss=MultipleNegativesRankingLoss(model), callbacks=[Clock()]
    )
    trainer.train()
    plain_s = clock["t1"] - clock["t0"]
    ours_s = trained["train_seconds"]
    res = {
        "command": "st-magnitude " + " ".join(_portable(cmd, work, args.data)),
        "steps": steps,
        "batch": batch,
        "max_seq_length": seq,
        "save_steps": save_steps,
        "compare_steps_per_s": trained["train_steps"] / ours_s,
        "compare_train_seconds": ours_s,
        "compare_wall_seconds": compare_wall,
        "plain_steps_per_s": steps / plain_s,
        "plain_train_seconds": plain_s,
    }
    res["ratio"] = res["compare_steps_per_s"] / res["plain_steps_per_s"]
    log(f"trainer: {res}")
    shutil.rmtree(out_dir, ignore_errors=True)
    shutil.rmtree(work / "plain-st", ignore_errors=True)
    _free(device)
    return res


def _portable(cmd: list[str], work: Path, data: str) -> list[str]:
    return [c.replace(str(work), "$WORK").replace(str(Path(data)), "$DATA") for c in cmd]


# ----------------------------------------------------------------------------------------------------------------
def versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "torch": torch.__version__}
    for mod in ("sentence_transformers", "transformers", "datasets"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception as exc:  # noqa: BLE001 - a missing package is reported, its sections fail on their own
            out[mod] = f"not importable ({type(exc).__name__})"
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="the result JSON")
    p.add_argument("--dry-run", action="store_true", help="CPU, tiny sizes: checks the code path in seconds")
    p.add_argument("--data", help="the folder of the BEIR datasets (default: .carry/data or $ST_MAGNITUDE_DATA/beir)")
    p.add_argument("--carry", default=str(CARRY), help="what prepare.sh made (models)")
    p.add_argument("--only", nargs="+", choices=SECTIONS, help="run only these sections")
    p.add_argument("--budget", type=float, default=450.0, help="seconds; sections not started by then are skipped")
    args = p.parse_args(argv)
    start = time.perf_counter()

    if args.dry_run:
        device = "cpu"
        torch.set_num_threads(1)  # tiny tensors: more threads only wait for each other on a shared machine
    elif torch.cuda.is_available():
        device = "cuda"
    else:
        print(
            "no CUDA device: this benchmark measures GPU training; run it on a GPU machine "
            "(bash benchmarks/gpu/run.sh), or check its code path on the CPU with --dry-run",
            file=sys.stderr,
        )
        return 2
    if args.data is None:
        carried = Path(args.carry) / "data"
        args.data = str(carried if carried.is_dir() else Path(os.environ.get("ST_MAGNITUDE_DATA", "")) / "beir")
    train_name, eval_name = "nfcorpus", "scifact"
    for name in (train_name, eval_name):
        if not (Path(args.data) / name / "corpus.jsonl").is_file():
            missing = Path(args.data) / name
            print(f"{missing} has no corpus.jsonl: pass the BEIR folders' parent as --data", file=sys.stderr)
            return 2

    sizes = SIZES["dry" if args.dry_run else "real"]
    work = Path(tempfile.mkdtemp(prefix="gpu-bench-"))
    result: dict = {
        "dry_run": args.dry_run,
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "versions": versions(),
        "sizes": {k: v for k, v in sizes.items()},
        "results": {},
        "errors": {},
        "seconds": {},
    }
    try:
        models = build_models(args, work)
        result["models"] = {k: v["note"] for k, v in models.items()}
        anchors, positives, _ = beir_texts(Path(args.data) / train_name, 0)
        _, _, corpus = beir_texts(Path(args.data) / eval_name, sizes["encode_docs"])
        ctx = dict(
            device=device,
            sizes=sizes,
            models=models,
            work=work,
            anchors=anchors,
            positives=positives,
            corpus=corpus,
            train_name=train_name,
            eval_name=eval_name,
        )
        fns = {
            "step": section_step,
            "syncs": lambda a, c: section_syncs(a, c, _free, log, load_st, batches, make_loss, PAIRS),
            "mw_pairs": lambda a, c: section_mw_pairs(a, c, sync, _free, log, load_st),
            "trainer": section_trainer,
            "encode": lambda a, c: section_encode(a, c, sync, _free, log, load_st),
            "search": lambda a, c: section_search(a, c, sync, _free, log),
        }
        for name in args.only or SECTIONS:
            if time.perf_counter() - start > args.budget:
                result["errors"][name] = f"skipped: the {args.budget:.0f} s budget was spent"
                continue
            log(f"== {name}")
            t0 = time.perf_counter()
            try:
                result["results"][name] = fns[name](args, ctx)
            except Exception as exc:  # noqa: BLE001 - one failing section must not lose the others' numbers
                traceback.print_exc()
                result["errors"][name] = f"{type(exc).__name__}: {exc}"[:500]
            result["seconds"][name] = round(time.perf_counter() - t0, 1)
            Path(args.out).write_text(json.dumps(result, indent=1, default=str) + "\n")  # partial results survive
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["seconds"]["total"] = round(time.perf_counter() - start, 1)
    Path(args.out).write_text(json.dumps(result, indent=1, default=str) + "\n")
    log(f"wrote {args.out} ({result['seconds']['total']} s; errors: {result['errors'] or 'none'})")
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
