"""Evaluate a model on local BEIR folders with its roles: nDCG@10, Recall@100, MRR@10 and pooled AUC per dataset."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from sentence_transformers.util import dot_score

from st_magnitude.data.beir import BEIRData, load_beir, subsample
from st_magnitude.evaluation.ir import (
    RoleIREvaluator,
    encode_roles,
    exact_search,
    per_query_metrics,
    retrieval_metrics,
)
from st_magnitude.model.load import describe_similarity, load_model, raw_model, require_roles
from st_magnitude.similarity import PowerNormSimilarity, Similarity, get_similarity

logger = logging.getLogger(__name__)

__all__ = ["PER_QUERY_KEY", "evaluate_folders", "evaluate_model", "format_table"]

#: Key of the per-query nDCG@10 (``{query id: score}``) in :func:`evaluate_model`'s row with ``per_query=True``.
PER_QUERY_KEY = "per_query_ndcg@10"
TABLE_COLUMNS = ("ndcg@10", "recall@100", "mrr@10", "pooled_auc", "per_query_auc")


def _rescoring_similarity(similarity: str | Similarity) -> Similarity:
    """The similarity to rescore raw embeddings with; only fixed per-role rescalings qualify (not tn)."""
    from st_magnitude.similarity import similarity_names  # the registry (the CLI's "rescore" names)

    rescore = similarity_names(fixed_gammas=True)
    sim = get_similarity(similarity)
    ok = sim.name in rescore if isinstance(similarity, str) else isinstance(sim, PowerNormSimilarity)
    if not ok:
        raise ValueError(
            f"similarity {sim.name!r} cannot rescore raw embeddings (it is not a fixed per-role rescaling); "
            f"choose from {', '.join(rescore)}."
        )
    return sim


def evaluate_model(
    model,
    data: BEIRData,
    *,
    similarity: str | Similarity | None = None,
    roles_required: bool = False,
    pooled_auc: bool = True,
    batch_size: int = 32,
    show_progress_bar: bool = False,
    per_query: bool = False,
    raw_views: Sequence[str] = (),
    norms: bool = False,
) -> dict[str, Any]:
    """One table row for ``data``.

    ``similarity=None`` scores the model's outputs with its own ``model.similarity`` (what it serves).
    A similarity name scores the model's *raw* embeddings (all normalisation removed, roles kept) with that family
    member instead — the cross-evaluation setting of paper 000 §4.2. ``roles_required=True`` refuses a model whose
    ``encode_query`` and ``encode_document`` coincide.

    Extra outputs (what ``st-magnitude compare`` records per run):

    * ``per_query=True``: ``row[PER_QUERY_KEY]``, nDCG@10 per judged query (pytrec_eval;
      :func:`~st_magnitude.evaluation.ir.per_query_metrics`), for paired comparisons across models and seeds.
    * ``raw_views=("cosine", "dot")``: ``row["ndcg@10_<name>_raw"]``, nDCG@10 of the *raw* embeddings scored with
      each name — the dual view of paper 000 App. N.3 (a magnitude collapse shows as cosine far below dot).
    * ``norms=True``: ``row["norms"]``, the raw norms of the relevant and the other documents and of the queries.

    With ``raw_views`` or ``norms`` the texts are encoded once, without normalisation, and the model's own
    per-role rescaling φ_γ is applied to those raw embeddings, which are then scored with a dot product: the model's
    own scores by construction, checked against ``encode_query`` / ``encode_document`` on a few texts. That needs a
    model carrying a similarity of the family (:func:`~st_magnitude.model_similarity`).
    """
    if roles_required:
        require_roles(model, "evaluation with --require-roles")
    scored = model
    desc = describe_similarity(model)
    if similarity is not None:
        sim = _rescoring_similarity(similarity)
        scored = raw_model(model)
        desc = f"{sim.name} on the raw embeddings (model normalisation removed)"
    t0 = time.perf_counter()
    ev = RoleIREvaluator(
        data.queries,
        data.corpus,
        data.qrels,
        ndcg_at_k=(10,),
        recall_at_k=(100,),
        mrr_at_k=(10,),
        similarity=None if similarity is None else get_similarity(similarity),
        pooled_auc=pooled_auc,
        batch_size=batch_size,
        show_progress_bar=show_progress_bar,
    )
    if raw_views or norms:
        metrics, extra = _evaluate_from_raw(model, scored, ev, similarity, raw_views, norms)
    else:
        metrics, extra = ev(scored), {}
    if per_query:
        scores = per_query_metrics(ev.qrels, ev.last_results)
        metrics[PER_QUERY_KEY] = {q: scores[q]["ndcg@10"] for q in sorted(scores)}
    return {
        "dataset": data.name,
        "split": data.split,
        "queries": len(data.queries),
        "corpus": len(data.corpus),
        "note": data.note,
        "scored_with": desc,
        "seconds": time.perf_counter() - t0,
        **metrics,
        **extra,
    }


def _evaluate_from_raw(
    model, scored, ev: RoleIREvaluator, similarity, raw_views: Sequence[str], norms: bool
) -> tuple[dict[str, Any], dict[str, Any]]:
    """:func:`evaluate_model`'s metrics from one raw encoding, plus the raw views and norms it asked for."""
    import torch

    from st_magnitude.model.info import model_similarity

    views = [get_similarity(v) for v in raw_views]  # an unknown name fails before the encoding
    raw = scored if similarity is not None else raw_model(model)
    rq, rd = ev.encode(raw)
    if similarity is not None:  # raw embeddings rescored with the given family member
        q, d, score_fn = rq, rd, get_similarity(similarity)
    else:
        sim = model_similarity(model)
        if sim is None:
            raise ValueError(
                "raw views and norms need a model carrying a similarity of the family (st_magnitude.apply_similarity)"
                f"; this one serves {describe_similarity(model)}"
            )
        with torch.no_grad():
            q, d = sim.transform_query(rq), sim.transform_document(rd)
        # the shortcut equals the model's own encode path
        mq, md = encode_roles(model, ev.queries[:4], ev.corpus_texts[:4], batch_size=ev.batch_size)
        if not (torch.allclose(mq, q[:4], atol=1e-4, rtol=1e-4) and torch.allclose(md, d[:4], atol=1e-4, rtol=1e-4)):
            raise RuntimeError("model encode_query/encode_document disagree with the similarity it carries")
        score_fn = dot_score  # φ already applied: the model's own scores (search's one-matmul path)
    metrics = ev.evaluate_embeddings(q, d, score_fn)
    for view in views:
        r = exact_search(rq, rd, ev.query_ids, ev.corpus_ids, top_k=10, score_fn=view)
        metrics[f"ndcg@10_{view.name}_raw"] = retrieval_metrics(ev.qrels, r, recall_at_k=(), mrr_at_k=())["ndcg@10"]
    extra: dict[str, Any] = {}
    if norms:
        dn = rd.norm(dim=-1).tolist()
        relevant = {doc for rel in ev.qrels.values() for doc, g in rel.items() if g > 0}
        extra["norms"] = {
            "relevant": [n for i, n in zip(ev.corpus_ids, dn) if i in relevant],
            "other": [n for i, n in zip(ev.corpus_ids, dn) if i not in relevant],
            "query": rq.norm(dim=-1).tolist(),
        }
    return metrics, extra


def evaluate_folders(
    model,
    folders: Sequence[str | os.PathLike],
    *,
    split: str = "test",
    max_corpus: int | None = None,
    max_queries: int | None = None,
    seed: int = 42,
    similarity: str | None = None,
    roles_required: bool = False,
    max_seq_length: int | None = None,
    on_missing: str = "raise",
    batch_size: int = 32,
    show_progress_bar: bool = False,
    trust_remote_code: bool = False,
    encoder: Callable[[Any], contextlib.AbstractContextManager] | None = None,
    on_loaded: Callable[[BEIRData], None] | None = None,
) -> list[dict[str, Any]]:
    """:func:`evaluate_model` on each BEIR folder (optionally NanoBEIR-style subsampled, stated in each row).

    ``max_corpus`` / ``max_queries``: ``None`` keeps everything; a number must be >= 1 (0 is refused, not "no
    limit"). ``trust_remote_code``: see :func:`~st_magnitude.model.load.load_model` (off by default).
    ``encoder``: ``None`` encodes with the torch model; else a context-manager factory ``encoder(model)`` that yields
    the model to encode with, e.g. :func:`st_magnitude.serving.onnx_model.onnx_encoder` (the ONNX export on ONNX
    Runtime), which scores with the model's own similarity (not with ``similarity``, which needs raw embeddings).
    ``on_loaded(data)``: called for each dataset once every folder is read, before the model is loaded (the CLI
    prints :meth:`~st_magnitude.data.beir.BEIRData.describe_kept`).
    """
    if not folders:
        raise ValueError("no dataset given: pass at least one BEIR folder (--data)")
    if encoder is not None and similarity is not None:
        raise ValueError("similarity rescores raw embeddings, which the ONNX graphs do not emit: use backend torch")
    if similarity is not None:
        _rescoring_similarity(similarity)  # validate the name before any work
    datasets = []
    for f in folders:  # load (and validate) everything before the slow encoding starts
        data = load_beir(f, split, on_missing=on_missing)
        if max_corpus is not None or max_queries is not None:
            data = subsample(data, max_corpus=max_corpus, max_queries=max_queries, seed=seed)
        datasets.append(data)
    if on_loaded is not None:
        for data in datasets:
            on_loaded(data)
    model = load_model(model, max_seq_length=max_seq_length, trust_remote_code=trust_remote_code)
    with contextlib.ExitStack() as stack:
        if encoder is not None:
            model = stack.enter_context(encoder(model))
        return [
            evaluate_model(
                model,
                d,
                similarity=similarity,
                roles_required=roles_required,
                batch_size=batch_size,
                show_progress_bar=show_progress_bar,
            )
            for d in datasets
        ]


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """Plain-text table, one line per dataset, plus the subsampling notes."""
    head = f"{'dataset':<14} {'split':<6} {'queries':>7} {'docs':>7} " + " ".join(f"{c:>13}" for c in TABLE_COLUMNS)
    lines = [head, "-" * len(head)]
    for r in rows:
        vals = " ".join(f"{r[c]:>13.4f}" if c in r else f"{'-':>13}" for c in TABLE_COLUMNS)
        lines.append(f"{r['dataset']:<14} {r['split']:<6} {r['queries']:>7} {r['corpus']:>7} {vals}")
    notes = [f"{r['dataset']}: {r['note']}" for r in rows if r.get("note")]
    lines.append("")
    lines.append(f"scored with: {rows[0]['scored_with']}" if rows else "")
    lines += notes
    return "\n".join(lines)
