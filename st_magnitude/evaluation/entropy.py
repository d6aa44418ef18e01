"""Contrastive entropy (paper 003 §3.6.1, after Fang et al. 2024), as a sentence-transformers evaluator.

For each query q with known positives P(q) and a fixed sample N(q) of ``n_negatives`` passages drawn uniformly
without replacement from the corpus minus P(q)::

    CE(q, p) = −log [ exp(s(q,p)/τ) / ( exp(s(q,p)/τ) + Σ_{n∈N(q)} exp(s(q,n)/τ) ) ]        (paper eq. 2)
    CE(q)    = mean_{p∈P(q)} CE(q, p)
    CE       = mean_q CE(q)                                                               (paper §3.6.1)

Lower is better. Each positive is scored against the negatives only, not against the query's other positives.
Choices where the paper is silent: one seeded sample per query, shared by all of that
query's positives and by every model evaluated with the same seed (so dimension sweeps are not confounded by
sampling noise); natural log; positives are qrels with relevance ≥ ``min_relevance`` (paper: > 0).
"""

from __future__ import annotations

import csv
import logging
import os
import warnings
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.base.evaluation.evaluator import SentenceEvaluator
from torch import Tensor

from st_magnitude.model.info import model_gammas, training_temperature
from st_magnitude.model.truncation import check_truncation
from st_magnitude.similarity import Similarity, get_similarity

logger = logging.getLogger(__name__)

__all__ = ["ContrastiveEntropyEvaluator", "contrastive_entropy", "sample_negatives"]


def sample_negatives(
    query_ids: list[str],
    corpus_ids: list[str],
    positives: Mapping[str, set[str]],
    n_negatives: int = 256,
    seed: int = 42,
) -> dict[str, list[str]]:
    """Seeded uniform sample of ``n_negatives`` corpus ids per query, without replacement, excluding its positives.

    The sample of a query depends only on ``(seed, query id, sorted corpus ids, its positives)``, not on the other
    queries or on dict order, so it is identical across models and runs.
    """
    if isinstance(n_negatives, bool) or not isinstance(n_negatives, int) or n_negatives < 1:
        raise ValueError(f"n_negatives must be a positive int, got {n_negatives!r}")
    pool = sorted(set(corpus_ids))
    out = {}
    for qid in query_ids:
        pos = positives.get(qid, set())
        candidates = [cid for cid in pool if cid not in pos]
        if len(candidates) < n_negatives:
            raise ValueError(
                f"query {qid!r}: only {len(candidates)} non-positive passages in the corpus, fewer than "
                f"n_negatives={n_negatives}; lower n_negatives to at most {len(candidates)}"
            )
        rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, zlib.crc32(str(qid).encode("utf-8"))])
        idx = rng.choice(len(candidates), size=n_negatives, replace=False)
        out[qid] = [candidates[i] for i in sorted(idx.tolist())]
    return out


def contrastive_entropy(
    query_embeddings: Tensor,
    positive_embeddings: list[Tensor],
    negative_embeddings: list[Tensor],
    similarity: Similarity | str = "dot",
    scale: float = 1.0,
) -> tuple[float, list[float]]:
    """Macro-averaged contrastive entropy from embeddings.

    Args:
        query_embeddings: ``[Q, m]``.
        positive_embeddings: per query a ``[k_q, m]`` tensor of its positives (k_q ≥ 1).
        negative_embeddings: per query a ``[n, m]`` tensor of its sampled negatives.
        similarity: :mod:`st_magnitude.similarity` name or instance; query is the first argument.
        scale: 1/τ (paper: 1 for BERT's raw dot, 50 for Ettin's cosine).

    Returns:
        ``(mean over queries, per-query values)``.
    """
    sim = get_similarity(similarity)
    if not (len(query_embeddings) == len(positive_embeddings) == len(negative_embeddings)):
        raise ValueError("need one positive and one negative tensor per query")
    per_query = []
    for q, pos, neg in zip(query_embeddings, positive_embeddings, negative_embeddings):
        if pos.shape[0] == 0:
            raise ValueError("every query needs at least one positive")
        s_pos = scale * sim(q.unsqueeze(0), pos).squeeze(0).double()  # [k]
        s_neg = scale * sim(q.unsqueeze(0), neg).squeeze(0).double()  # [n]
        # CE(q,p) = logsumexp([s_p, s_neg]) − s_p, for every positive p at once
        neg_lse = torch.logsumexp(s_neg, dim=0)
        ce = torch.logaddexp(s_pos, neg_lse) - s_pos
        per_query.append(float(ce.mean()))
    if not per_query:
        raise ValueError("no queries to evaluate")
    return float(np.mean(per_query)), per_query


class ContrastiveEntropyEvaluator(SentenceEvaluator):
    """Contrastive entropy of (query, positive) pairs against 256 random corpus passages (paper 003 §3.6.1).

    Args:
        queries: ``{query_id: text}``.
        corpus: ``{doc_id: text}`` — the passages negatives are drawn from.
        relevant_docs: ``{query_id: {doc_id: relevance}}`` or ``{query_id: set(doc_ids)}`` (a set means
            relevance 1). Queries without a positive are skipped (and counted in the log).
        n_negatives: negatives per query (paper: 256).
        similarity: ``None`` — score with ``model.similarity`` (what the model serves, e.g. after
            ``st_magnitude.apply_similarity``); or a :mod:`st_magnitude.similarity` name / instance.
        scale: 1/τ applied to the similarity (paper: 1.0 for BERT raw dot; 50.0 for Ettin cosine, τ = 0.02).
            ``None`` (default): 1/τ with the τ the model was trained at, as recorded by
            :class:`~st_magnitude.losses.BertRecipeLoss` / ``EttinRecipeLoss``
            (:func:`st_magnitude.model.info.training_temperature`); a model with no recorded τ gets 1.0, with a warning
            when it is scored by cosine (cosine at τ = 1 keeps every logit in [−1, 1], so the metric sits near
            chance, log(1 + n_negatives)). The scale used is in ``self.last_scale``.
        min_relevance: smallest qrel grade that counts as positive (paper: > 0, i.e. 1).
        seed: negative-sampling seed; fixed across models so comparisons share the same negatives.
        batch_size: encoding batch size.
        name: metric prefix.
        query_prompt_name / corpus_prompt_name: prompts passed to ``encode_query`` / ``encode_document``.
        write_csv: append the result to ``contrastive_entropy_evaluation_<name>_results.csv`` under
            ``output_path``.

    Metrics: ``contrastive_entropy`` (primary, lower is better) and ``n_queries``.

    Example::

        from sentence_transformers import SentenceTransformer
        from st_magnitude.evaluation.entropy import ContrastiveEntropyEvaluator

        model = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2")
        corpus = {f"d{i}": f"passage {i}" for i in range(300)}
        ev = ContrastiveEntropyEvaluator({"q1": "passage 3"}, corpus, {"q1": {"d3": 1}}, scale=50.0)  # cos/0.02
        print(ev(model))   # {'contrastive_entropy': ..., 'n_queries': 1.0}
    """

    def __init__(
        self,
        queries: Mapping[str, str],
        corpus: Mapping[str, str],
        relevant_docs: Mapping[str, Any],
        n_negatives: int = 256,
        similarity: str | Similarity | None = None,
        scale: float | None = None,
        min_relevance: int = 1,
        seed: int = 42,
        batch_size: int = 32,
        name: str = "",
        query_prompt_name: str | None = None,
        corpus_prompt_name: str | None = None,
        show_progress_bar: bool = False,
        write_csv: bool = True,
    ) -> None:
        super().__init__()
        if scale is not None and not (isinstance(scale, (int, float)) and not isinstance(scale, bool) and scale > 0):
            raise ValueError(
                f"scale must be a positive number (1/temperature) or None (from the model), got {scale!r}"
            )
        self.similarity = None if similarity is None else get_similarity(similarity)
        self.scale = None if scale is None else float(scale)
        self.last_scale: float | None = None
        self.n_negatives = n_negatives
        self.min_relevance = min_relevance
        self.seed = int(seed)
        self.batch_size = int(batch_size)
        self.name = name
        self.query_prompt_name = query_prompt_name
        self.corpus_prompt_name = corpus_prompt_name
        self.show_progress_bar = show_progress_bar
        self.write_csv = write_csv
        self.corpus = dict(corpus)
        self.positives = _positives(relevant_docs, min_relevance)
        missing = {d for pos in self.positives.values() for d in pos if d not in self.corpus}
        if missing:
            raise ValueError(f"{len(missing)} positive doc ids are not in the corpus, e.g. {sorted(missing)[:3]}")
        unknown = [qid for qid in self.positives if qid not in queries]
        if unknown:
            logger.info("ContrastiveEntropyEvaluator: %d qrels query ids have no query text; skipped", len(unknown))
        self.query_ids = sorted(qid for qid in queries if self.positives.get(qid))
        skipped = len(queries) - len(self.query_ids)
        if skipped:
            logger.info("ContrastiveEntropyEvaluator: %d queries have no positive and are skipped", skipped)
        if not self.query_ids:
            raise ValueError(f"no query has a positive with relevance >= {min_relevance}")
        self.queries = {qid: queries[qid] for qid in self.query_ids}
        self.negatives = sample_negatives(self.query_ids, list(self.corpus), self.positives, n_negatives, self.seed)
        self.primary_metric = "contrastive_entropy"
        self.greater_is_better = False
        self.csv_file = f"contrastive_entropy_evaluation{('_' + name) if name else ''}_results.csv"

    def __call__(
        self, model: Any, output_path: str | None = None, epoch: int = -1, steps: int = -1
    ) -> dict[str, float]:
        check_truncation(model)
        scale = self.resolve_scale(model)
        needed = self.needed_doc_ids()
        q_emb = model.encode_query(
            [self.queries[q] for q in self.query_ids],
            batch_size=self.batch_size,
            convert_to_tensor=True,
            prompt_name=self.query_prompt_name,
            show_progress_bar=self.show_progress_bar,
        )
        d_emb = model.encode_document(
            [self.corpus[d] for d in needed],
            batch_size=self.batch_size,
            convert_to_tensor=True,
            prompt_name=self.corpus_prompt_name,
            show_progress_bar=self.show_progress_bar,
        )
        similarity = self.similarity if self.similarity is not None else _ModelSimilarity(model)
        value = self.compute_from_embeddings(q_emb, self.query_ids, d_emb, needed, similarity, scale=scale)
        metrics = {"contrastive_entropy": value, "n_queries": float(len(self.query_ids))}
        if output_path is not None and self.write_csv:
            os.makedirs(output_path, exist_ok=True)
            path = os.path.join(output_path, self.csv_file)
            new = not os.path.isfile(path)
            with open(path, "a", newline="", encoding="utf-8") as fh:
                writer = csv.writer(fh)
                if new:
                    writer.writerow(["epoch", "steps", "contrastive_entropy", "n_queries"])
                writer.writerow([epoch, steps, value, len(self.query_ids)])
        metrics = self.prefix_name_to_metrics(metrics, self.name)
        self.store_metrics_in_model_card_data(model, metrics, epoch, steps)
        return metrics

    def resolve_scale(self, model: Any) -> float:
        """The 1/τ used for ``model``: the evaluator's ``scale``, else the model's recorded training temperature."""
        if self.scale is not None:
            return self.scale
        tau = training_temperature(model)
        if tau is not None:
            return 1.0 / tau
        served_cosine = (
            self.similarity.name == "cosine"
            if self.similarity is not None
            else getattr(model, "similarity_fn_name", None) == "cosine"
            or (isinstance(model, SentenceTransformer) and model_gammas(model) == (1.0, 1.0))
        )
        if served_cosine:
            warnings.warn(
                "ContrastiveEntropyEvaluator: the model records no training temperature and is scored by cosine; "
                "using scale=1 (τ = 1) keeps every logit in [-1, 1] and the metric near chance. Pass scale=1/τ "
                "(paper 003 Ettin: 50.0), or build the loss with EttinRecipeLoss, which records τ on the model.",
                UserWarning,
                stacklevel=3,
            )
        return 1.0

    def needed_doc_ids(self) -> list[str]:
        """The corpus ids the metric reads: every positive and every sampled negative (sorted)."""
        return sorted({d for qid in self.query_ids for d in self.positives[qid] | set(self.negatives[qid])})

    def compute_from_embeddings(
        self,
        query_embeddings: Tensor,
        query_ids: list[str],
        doc_embeddings: Tensor,
        doc_ids: list[str],
        similarity: str | Similarity | None = None,
        scale: float | None = None,
    ) -> float:
        """Contrastive entropy from precomputed embeddings (rows aligned with ``query_ids`` / ``doc_ids``).

        ``doc_ids`` must cover :meth:`needed_doc_ids`; ``similarity`` defaults to the evaluator's, ``scale`` to the
        evaluator's (1.0 when that is ``None``: there is no model here to read τ from). Sets ``self.per_query``.
        """
        scale = scale if scale is not None else (self.scale if self.scale is not None else 1.0)
        similarity = similarity if similarity is not None else self.similarity
        if similarity is None:
            raise ValueError("no similarity: pass one here or to the evaluator (None means model.similarity)")
        q_row = {q: i for i, q in enumerate(query_ids)}
        d_row = {d: i for i, d in enumerate(doc_ids)}
        missing_q = [q for q in self.query_ids if q not in q_row]
        missing_d = [d for d in self.needed_doc_ids() if d not in d_row]
        if missing_q or missing_d:
            raise ValueError(f"embeddings missing for {len(missing_q)} queries and {len(missing_d)} passages")
        q_emb = query_embeddings[[q_row[q] for q in self.query_ids]]
        pos = [doc_embeddings[[d_row[d] for d in sorted(self.positives[q])]] for q in self.query_ids]
        neg = [doc_embeddings[[d_row[d] for d in self.negatives[q]]] for q in self.query_ids]
        value, per_query = contrastive_entropy(q_emb, pos, neg, similarity, scale)
        self.last_scale = float(scale)
        self.per_query = dict(zip(self.query_ids, per_query))
        return value

    def get_config_dict(self) -> dict[str, Any]:
        return {
            "n_negatives": self.n_negatives,
            "scale": "model training temperature" if self.scale is None else self.scale,
            "similarity": None if self.similarity is None else self.similarity.get_config_dict(),
            "min_relevance": self.min_relevance,
            "seed": self.seed,
        }


class _ModelSimilarity(Similarity):
    """Adapter so ``model.similarity`` (what the model serves) is usable where a Similarity is expected.

    It is not a power-norm member and claims no γ: only the matrix and pairwise forms, delegated to the model.
    sentence-transformers' similarity functions (cosine, dot, euclidean, manhattan) are symmetric in their two
    arguments; any query/document asymmetry of a converted model lives in its encoders, not in this function.
    """

    name = "model"

    def __init__(self, model: Any) -> None:
        super().__init__()
        self._model = [model]

    def forward(self, queries: Tensor, documents: Tensor) -> Tensor:
        return self._model[0].similarity(queries, documents)

    def pairwise(self, queries: Tensor, documents: Tensor) -> Tensor:
        return self._model[0].similarity_pairwise(queries, documents)

    @property
    def symmetric(self) -> bool:
        return True


def _positives(relevant_docs: Mapping[str, Any], min_relevance: int) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for qid, docs in relevant_docs.items():
        if isinstance(docs, Mapping):
            out[qid] = {d for d, rel in docs.items() if rel >= min_relevance}
        elif isinstance(docs, (set, list, tuple, frozenset)):
            out[qid] = set(docs)
        else:
            raise ValueError(
                f"relevant_docs[{qid!r}] must be a {{doc_id: relevance}} dict or a set of doc ids, "
                f"got {type(docs).__name__}"
            )
    return out
