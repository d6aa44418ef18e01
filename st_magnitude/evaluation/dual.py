"""Dual dot/cosine evaluation on the same embeddings: the magnitude-collapse detector (paper 000 App. N.3).

Paper 000 (Table 24) evaluates the *same* embeddings with dot and with cosine throughout training. A
healthy magnitude-aware model keeps Δ = nDCG_dot − nDCG_cos small and positive (≈ 0.02–0.03); magnitude collapse is
when cosine nDCG falls toward random while dot improves (E5 with its Normalize removed: cosine 0.92 → 0.23 while dot
→ 0.94, Δ = +0.717).

The detector (our choice, docs/evaluation.md): warn with :class:`MagnitudeCollapseDetected` when, compared with the
previous call, cosine nDCG fell by more than ``drop_tol`` while dot nDCG did not fall, or whenever
Δ > ``gap_threshold`` (default 0.1 — between the healthy ≈0.03 and the collapsed 0.72 of Table 24).
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

from torch import Tensor

from st_magnitude._warnings import MagnitudeCollapseWarning
from st_magnitude.evaluation.ir import RoleIREvaluator
from st_magnitude.similarity import get_similarity

logger = logging.getLogger(__name__)

__all__ = ["DualSimilarityEvaluator", "MagnitudeCollapseDetected"]

_MAIN = ("dot", "cosine")


class MagnitudeCollapseDetected(MagnitudeCollapseWarning):
    """Cosine nDCG falls while dot nDCG rises on the same embeddings (paper 000 App. N.3)."""


class DualSimilarityEvaluator(RoleIREvaluator):
    """Evaluate the same role-encoded embeddings with dot and with cosine; warn on magnitude collapse.

    The model's outputs (``encode_query`` / ``encode_document``) are scored twice: with a plain dot product — for a
    converted model, that is its trained similarity — and with cosine (magnitudes removed). Reports
    ``dot_ndcg@k``, ``cosine_ndcg@k`` and ``dot_minus_cosine``; the primary metric is ``main`` (``"dot"``).

    Args:
        queries, corpus, relevant_docs: as :class:`RoleIREvaluator`.
        ndcg_at_k: cut-off for nDCG (default 10).
        gap_threshold: warn whenever nDCG_dot − nDCG_cos exceeds it.
        drop_tol: warn when cosine nDCG fell by more than this since the previous call while dot did not fall.
        main: ``"dot"`` or ``"cosine"`` — the primary metric.
        ignore_identical_ids, batch_size, name, show_progress_bar: as :class:`RoleIREvaluator`.

    Example::

        evaluator = DualSimilarityEvaluator(queries, corpus, qrels, name="val")
        trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=ds, loss=loss, evaluator=evaluator)
    """

    def __init__(
        self,
        queries: dict[str, str],
        corpus: dict[str, Any],
        relevant_docs: dict[str, Any],
        *,
        ndcg_at_k: int = 10,
        gap_threshold: float = 0.1,
        drop_tol: float = 0.02,
        main: str = "dot",
        ignore_identical_ids: bool = True,
        batch_size: int = 32,
        name: str = "",
        show_progress_bar: bool = False,
    ) -> None:
        if main not in _MAIN:
            raise ValueError(f"main must be one of {_MAIN}, got {main!r}")
        if not (gap_threshold > 0 and drop_tol >= 0):
            raise ValueError(f"gap_threshold must be > 0 and drop_tol >= 0, got {gap_threshold}, {drop_tol}")
        super().__init__(
            queries,
            corpus,
            relevant_docs,
            ndcg_at_k=(ndcg_at_k,),
            recall_at_k=(),
            mrr_at_k=(),
            ignore_identical_ids=ignore_identical_ids,
            batch_size=batch_size,
            name=name,
            show_progress_bar=show_progress_bar,
        )
        self.k = ndcg_at_k
        self.gap_threshold = float(gap_threshold)
        self.drop_tol = float(drop_tol)
        self.main = main
        self.primary_metric = f"{main}_ndcg@{ndcg_at_k}"
        self.history: list[dict[str, float]] = []

    def evaluate_embeddings(self, query_embeddings: Tensor, corpus_embeddings: Tensor, score_fn=None) -> dict:
        out: dict[str, float] = {}
        for label in _MAIN:
            m = super().evaluate_embeddings(query_embeddings, corpus_embeddings, get_similarity(label))
            out[f"{label}_ndcg@{self.k}"] = m[f"ndcg@{self.k}"]
        out["dot_minus_cosine"] = out[f"dot_ndcg@{self.k}"] - out[f"cosine_ndcg@{self.k}"]
        out["collapse"] = float(self._check(out))
        self.history.append(out)
        return out

    def _check(self, cur: dict[str, float]) -> bool:
        dot, cos = cur[f"dot_ndcg@{self.k}"], cur[f"cosine_ndcg@{self.k}"]
        reasons = []
        if dot - cos > self.gap_threshold:
            reasons.append(f"nDCG@{self.k} dot {dot:.4f} exceeds cosine {cos:.4f} by more than {self.gap_threshold}")
        if self.history:
            prev = self.history[-1]
            p_dot, p_cos = prev[f"dot_ndcg@{self.k}"], prev[f"cosine_ndcg@{self.k}"]
            if p_cos - cos > self.drop_tol and dot >= p_dot:
                reasons.append(
                    f"cosine nDCG@{self.k} fell {p_cos:.4f} → {cos:.4f} while dot went {p_dot:.4f} → {dot:.4f}"
                )
        if reasons:
            warnings.warn(
                "Possible magnitude collapse (paper 000 App. N.3): " + "; ".join(reasons) + ". The model may be "
                "encoding relevance in norms only; consider more data, a lower learning rate, or cosine/dnorm.",
                MagnitudeCollapseDetected,
                stacklevel=3,
            )
            return True
        return False

    def __call__(self, model, output_path: str | None = None, epoch: int = -1, steps: int = -1) -> dict[str, float]:
        q, d = self.encode(model)
        metrics = self.evaluate_embeddings(q, d)
        return self._report(model, metrics, output_path, f"dual_{self.name or 'eval'}.csv", epoch, steps)

    def get_config_dict(self) -> dict[str, Any]:
        return {"gap_threshold": self.gap_threshold, "drop_tol": self.drop_tol, "main": self.main}
