"""Information retrieval that honours the model's query/document roles.

* Queries are encoded with ``model.encode_query`` and documents with ``model.encode_document`` (ST task routing),
  and scored with ``model.similarity`` — for a model converted by :func:`st_magnitude.apply_similarity` that is a
  plain dot product of φ_γq(q) and φ_γd(d), i.e. exactly the similarity it was trained with.
* :func:`exact_search` reads the corpus once in chunks (tensor, numpy memmap or ``.npy`` file), scoring each chunk
  with one matmul and keeping a running ``torch.topk`` per query (no Python heap, no per-corpus id lookup), with a
  tqdm bar; ``benchmarks/bench_search.py`` compares it with BEIR's ``DenseRetrievalExactSearch`` and
  ``benchmarks/bench_scale.py`` with plain torch at 10k–1M documents.
* Metrics are never hand-written: nDCG/Recall/MAP/P come from pytrec_eval through BEIR's
  ``EvaluateRetrieval.evaluate`` and MRR from ``EvaluateRetrieval.evaluate_custom(metric="mrr")``.

Identical ids: like BEIR (``DenseRetrievalExactSearch`` and ``EvaluateRetrieval.evaluate``), a document whose id
equals the query id is skipped by default (``ignore_identical_ids=True``). ST's ``InformationRetrievalEvaluator``
and mteb (by default) keep it; our mteb local tasks set ``ignore_identical_ids=True`` to match.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

import torch
from sentence_transformers.sentence_transformer.evaluation import SentenceEvaluator
from torch import Tensor

from st_magnitude.data.text import doc_text
from st_magnitude.evaluation._retrieval import (  # shared with auc/dual; re-exported here
    AUCPools,
    ScoreFn,
    _append_csv,
    encode_roles,
    per_query_auc,
    pooled_auc_pools,
    pooled_auc_score,
    resolve_score_fn,
)
from st_magnitude.evaluation.search import CorpusLike, as_corpus, results_from_topk, topk_search
from st_magnitude.similarity import Similarity

logger = logging.getLogger(__name__)


def doc_texts(corpus: dict[str, Any], ids: Sequence[str], sep: str = " ") -> list[str]:
    """Texts of ``ids`` as mteb builds them: ``(title + sep + text).strip()`` (or the string itself)."""
    return [doc_text(corpus[cid], sep) for cid in ids]


def exact_search(
    query_embeddings: Tensor,
    corpus_embeddings: CorpusLike,
    query_ids: Sequence[str],
    corpus_ids: Sequence[str],
    top_k: int = 100,
    score_fn: ScoreFn | None = None,
    *,
    ignore_identical_ids: bool = True,
    query_chunk_size: int | None = None,
    corpus_chunk_size: int | None = None,
    device: str | torch.device | None = None,
    show_progress_bar: bool = False,
) -> dict[str, dict[str, float]]:
    """Exhaustive top-k search: ``{query_id: {doc_id: score}}`` with the ``top_k`` best documents per query.

    One pass over the corpus in chunks with a running top-k merge (:func:`~st_magnitude.evaluation.topk_search`),
    so time is one corpus pass and memory the corpus plus a fixed working set; ``corpus_embeddings`` may be a tensor,
    a numpy array / memmap, an :class:`~st_magnitude.evaluation.embeddings_store.EmbeddingStore` or a path to a
    ``.npy`` file (read in chunks, so a corpus larger than RAM is searchable). ``score_fn`` defaults to the dot
    product. Equal scores are ordered by corpus position. With ``ignore_identical_ids`` the search takes
    ``top_k + 1`` and drops the document whose id equals the query id (BEIR's rule), so no id lookup over the
    corpus is built.
    """
    corpus = as_corpus(corpus_embeddings)
    if len(query_ids) != len(query_embeddings) or len(corpus_ids) != corpus.shape[0]:
        raise ValueError(
            f"ids and embeddings differ in length: {len(query_ids)} query ids for {len(query_embeddings)} "
            f"embeddings, {len(corpus_ids)} corpus ids for {corpus.shape[0]} embeddings"
        )
    if len(corpus_ids) == 0:
        raise ValueError("The corpus is empty: retrieval needs at least one document.")
    if top_k <= 0:
        raise ValueError(f"top_k must be positive, got {top_k}")
    if not isinstance(corpus_ids, (list, tuple)):
        corpus_ids = list(corpus_ids)
    values, indices = topk_search(
        query_embeddings,
        corpus,
        top_k + (1 if ignore_identical_ids else 0),
        score_fn,
        query_chunk_size=query_chunk_size,
        corpus_chunk_size=corpus_chunk_size,
        device=device,
        show_progress_bar=show_progress_bar,
    )
    return results_from_topk(
        values, indices, list(query_ids), corpus_ids, top_k, ignore_identical_ids=ignore_identical_ids
    )


def retrieval_metrics(
    qrels: dict[str, dict[str, int]],
    results: dict[str, dict[str, float]],
    *,
    ndcg_at_k: Sequence[int] = (10,),
    recall_at_k: Sequence[int] = (100,),
    mrr_at_k: Sequence[int] = (10,),
    map_at_k: Sequence[int] = (),
    precision_at_k: Sequence[int] = (),
    ignore_identical_ids: bool = True,
) -> dict[str, float]:
    """nDCG/Recall/MAP/P@k (pytrec_eval through BEIR's ``EvaluateRetrieval.evaluate``) and MRR@k
    (``EvaluateRetrieval.evaluate_custom``). Keys: ``ndcg@10``, ``recall@100``, ``mrr@10``, ``map@k``, ``precision@k``.

    Only queries in ``qrels`` are scored (BEIR averages MRR over ``len(qrels)``); ``results`` is not modified.
    """
    from beir.retrieval.evaluation import EvaluateRetrieval

    results = {q: dict(results.get(q, {})) for q in qrels}
    ks = sorted({*ndcg_at_k, *recall_at_k, *map_at_k, *precision_at_k} or {10})
    ndcg, _map, recall, precision = EvaluateRetrieval.evaluate(
        qrels, results, ks, ignore_identical_ids=ignore_identical_ids
    )
    out: dict[str, float] = {}
    for k in ndcg_at_k:
        out[f"ndcg@{k}"] = ndcg[f"NDCG@{k}"]
    for k in recall_at_k:
        out[f"recall@{k}"] = recall[f"Recall@{k}"]
    for k in map_at_k:
        out[f"map@{k}"] = _map[f"MAP@{k}"]
    for k in precision_at_k:
        out[f"precision@{k}"] = precision[f"P@{k}"]
    if mrr_at_k:
        mrr = EvaluateRetrieval.evaluate_custom(qrels, results, list(mrr_at_k), metric="mrr")
        for k in mrr_at_k:
            out[f"mrr@{k}"] = mrr[f"MRR@{k}"]
    return out


class RoleIREvaluator(SentenceEvaluator):
    """Retrieval evaluator that encodes with the model's roles and scores with the model's own similarity.

    A drop-in alternative to ST's ``InformationRetrievalEvaluator`` for magnitude-aware models: queries through
    ``encode_query``, corpus through ``encode_document``, scores from ``model.similarity`` (or ``similarity``),
    exact top-k search, metrics from pytrec_eval via BEIR. Optionally adds pooled ROC-AUC (paper 001 §5.1) on the same
    embeddings.

    Args:
        queries: ``{query_id: text}``.
        corpus: ``{doc_id: text}`` or ``{doc_id: {"title", "text"}}`` (BEIR layout).
        relevant_docs: ``{query_id: {doc_id: grade}}`` or ``{query_id: set(doc_ids)}``; grade > 0 is relevant.
        ndcg_at_k, recall_at_k, mrr_at_k, map_at_k: cut-offs.
        similarity: ``None`` (the model's own) or a name / :class:`Similarity` / callable applied to its outputs.
        pooled_auc: also compute pooled and per-query ROC-AUC with ``auc_negatives`` hard negatives per query.
        auc_negatives: negatives per query for the AUC (paper 001: 500).
        ignore_identical_ids: skip documents whose id equals the query id (BEIR convention).
        batch_size: encoding batch size.
        name: prefix of the metric keys.
        show_progress_bar: show encoding/search bars.

    Example::

        from st_magnitude.evaluation import RoleIREvaluator
        evaluator = RoleIREvaluator(queries, corpus, qrels, name="scifact", pooled_auc=True)
        metrics = evaluator(model)      # {"scifact_ndcg@10": ..., "scifact_pooled_auc": ...}
    """

    def __init__(
        self,
        queries: dict[str, str],
        corpus: dict[str, Any],
        relevant_docs: dict[str, Any],
        *,
        ndcg_at_k: Sequence[int] = (10,),
        recall_at_k: Sequence[int] = (100,),
        mrr_at_k: Sequence[int] = (10,),
        map_at_k: Sequence[int] = (),
        similarity: str | Similarity | ScoreFn | None = None,
        pooled_auc: bool = False,
        auc_negatives: int = 500,
        ignore_identical_ids: bool = True,
        batch_size: int = 32,
        name: str = "",
        show_progress_bar: bool = False,
    ) -> None:
        super().__init__()
        qrels = _normalise_qrels(relevant_docs)
        missing = sorted({d for rel in qrels.values() for d in rel if d not in corpus})
        if not corpus:
            raise ValueError("The corpus is empty: retrieval evaluation needs at least one document.")
        if missing:
            raise ValueError(
                f"{len(missing)} relevant document id(s) are missing from the corpus (e.g. {missing[:5]}); every "
                "judged document must be in the corpus (load_beir(..., on_missing='drop') drops them)."
            )
        missing_q = sorted(q for q in qrels if q not in queries)
        if missing_q:
            raise ValueError(f"{len(missing_q)} judged query id(s) have no text in `queries` (e.g. {missing_q[:5]}).")
        if not qrels:
            raise ValueError("relevant_docs is empty: nothing to evaluate.")
        self.qrels = qrels
        self.query_ids = list(qrels)
        self.queries = [queries[q] for q in self.query_ids]
        self.corpus_ids = list(corpus)
        self.corpus_texts = doc_texts(corpus, self.corpus_ids)
        self.ndcg_at_k, self.recall_at_k = tuple(ndcg_at_k), tuple(recall_at_k)
        self.mrr_at_k, self.map_at_k = tuple(mrr_at_k), tuple(map_at_k)
        self.top_k = max([*self.ndcg_at_k, *self.recall_at_k, *self.mrr_at_k, *self.map_at_k, 1])
        self.similarity = similarity
        self.pooled_auc = pooled_auc
        self.auc_negatives = auc_negatives
        self.ignore_identical_ids = ignore_identical_ids
        self.batch_size = batch_size
        self.name = name
        self.show_progress_bar = show_progress_bar
        if self.ndcg_at_k:
            self.primary_metric = f"ndcg@{self.ndcg_at_k[0]}"
        elif self.mrr_at_k:
            self.primary_metric = f"mrr@{self.mrr_at_k[0]}"
        else:
            self.primary_metric = "pooled_auc" if pooled_auc else None
        self.last_results: dict[str, dict[str, float]] | None = None

    def encode(self, model) -> tuple[Tensor, Tensor]:
        return encode_roles(
            model,
            self.queries,
            self.corpus_texts,
            batch_size=self.batch_size,
            show_progress_bar=self.show_progress_bar,
        )

    def evaluate_embeddings(self, query_embeddings: Tensor, corpus_embeddings: Tensor, score_fn: ScoreFn) -> dict:
        """Metrics (no name prefix) for precomputed embeddings in ``self.query_ids`` / ``self.corpus_ids`` order."""
        results = exact_search(
            query_embeddings,
            corpus_embeddings,
            self.query_ids,
            self.corpus_ids,
            self.top_k,
            score_fn,
            ignore_identical_ids=self.ignore_identical_ids,
            show_progress_bar=self.show_progress_bar,
        )
        self.last_results = results
        metrics = retrieval_metrics(
            self.qrels,
            results,
            ndcg_at_k=self.ndcg_at_k,
            recall_at_k=self.recall_at_k,
            mrr_at_k=self.mrr_at_k,
            map_at_k=self.map_at_k,
            ignore_identical_ids=self.ignore_identical_ids,
        )
        if self.pooled_auc:
            metrics.update(self._pooled_auc(query_embeddings, corpus_embeddings, score_fn, self.auc_negatives)[1])
        return metrics

    def _pooled_auc(
        self, query_embeddings: Tensor, corpus_embeddings: Tensor, score_fn: ScoreFn, n_negatives: int
    ) -> tuple[AUCPools, dict[str, float]]:
        """The pooled positive/negative scores and their ``pooled_auc`` / ``per_query_auc`` (paper 001 §5.1)."""
        pools = pooled_auc_pools(
            query_embeddings,
            corpus_embeddings,
            self.query_ids,
            self.corpus_ids,
            self.qrels,
            score_fn,
            n_negatives=n_negatives,
            ignore_identical_ids=self.ignore_identical_ids,
        )
        return pools, {
            "pooled_auc": pooled_auc_score(pools.positives, pools.negatives),
            "per_query_auc": per_query_auc(pools),
        }

    def _report(
        self, model, metrics: dict[str, float], output_path: str | None, csv_name: str, epoch: int, steps: int
    ) -> dict[str, float]:
        """Append ``metrics`` to ``output_path/csv_name``; return them name-prefixed and stored in the model card."""
        if output_path is not None:
            os.makedirs(output_path, exist_ok=True)
            _append_csv(os.path.join(output_path, csv_name), epoch, steps, metrics)
        metrics = self.prefix_name_to_metrics(metrics, self.name)
        self.store_metrics_in_model_card_data(model, metrics, epoch, steps)
        return metrics

    def __call__(self, model, output_path: str | None = None, epoch: int = -1, steps: int = -1) -> dict[str, float]:
        score_fn, desc = resolve_score_fn(model, self.similarity)
        logger.info("RoleIREvaluator %s: scoring with %s", self.name or "", desc)
        q, d = self.encode(model)
        metrics = self.evaluate_embeddings(q, d, score_fn)
        return self._report(model, metrics, output_path, f"role_ir_{self.name or 'eval'}.csv", epoch, steps)

    def get_config_dict(self) -> dict[str, Any]:
        sim = self.similarity
        return {
            "similarity": "model" if sim is None else getattr(sim, "name", sim if isinstance(sim, str) else "custom"),
            "ignore_identical_ids": self.ignore_identical_ids,
            "pooled_auc": self.pooled_auc,
        }


def _normalise_qrels(relevant_docs: dict[str, Any]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for q, rel in relevant_docs.items():
        if isinstance(rel, dict):
            out[str(q)] = {str(d): int(s) for d, s in rel.items()}
        else:
            out[str(q)] = {str(d): 1 for d in rel}
    return {q: r for q, r in out.items() if any(s > 0 for s in r.values())}


def per_query_metrics(
    qrels: dict[str, dict[str, int]], results: dict[str, dict[str, float]], k: int = 10
) -> dict[str, dict[str, float]]:
    """Per-query ``ndcg@k``, ``recall@1`` and ``recall@100`` with pytrec_eval (the library BEIR uses: the mean of
    ``ndcg@k`` over ``qrels`` is :func:`retrieval_metrics`' ``ndcg@k``). A query without results scores 0.

    The per-query scores are what paired comparisons between models need (:mod:`st_magnitude.evaluation.stats`).
    """
    import pytrec_eval

    run = {q: {d: float(s) for d, s in results.get(q, {}).items() if d != q} for q in qrels}
    scores = pytrec_eval.RelevanceEvaluator(qrels, {f"ndcg_cut.{k}", "recall.1", "recall.100"}).evaluate(run)
    keys = {f"ndcg@{k}": f"ndcg_cut_{k}", "recall@1": "recall_1", "recall@100": "recall_100"}
    return {q: {name: scores[q][key] if q in scores else 0.0 for name, key in keys.items()} for q in qrels}
