"""The comparison's evaluation sets (:mod:`st_magnitude.data.eval_set`, shared with ``replicate``), scored
for every run."""

from __future__ import annotations

import logging
from pathlib import Path

from st_magnitude.data.eval_set import EvalSet, load_eval_set
from st_magnitude.lab.compare.config import CompareConfig

logger = logging.getLogger(__name__)

__all__ = ["load_eval_sets", "evaluate_sets"]


def load_eval_sets(folders: dict[str, Path], config: CompareConfig) -> list[EvalSet]:
    """Each folder's test split, NanoBEIR-style subsampled by the config, with queries, corpus and qrels ordered by
    id (so equal scores rank the same whatever the order of the files)."""
    return [
        load_eval_set(
            folder,
            "test",
            max_corpus=config.max_corpus,
            max_queries=config.max_queries,
            seed=config.subsample_seed,
            name=name,
        )
        for name, folder in folders.items()
    ]


def evaluate_sets(model, eval_sets: list[EvalSet], batch_size: int = 64) -> tuple[dict[str, dict], dict[str, dict]]:
    """``(metrics, norms)`` per dataset: :func:`st_magnitude.evaluation.runner.evaluate_model` with the model's
    own similarity, plus what the comparison records — per-query nDCG@10 (``PER_QUERY_KEY``), the dual cosine/dot
    view of the raw embeddings and their norms (for the histograms)."""
    from st_magnitude.evaluation.runner import evaluate_model

    metrics, norms = {}, {}
    for es in eval_sets:
        row = evaluate_model(
            model,
            es.data,
            batch_size=batch_size,
            show_progress_bar=True,
            per_query=True,
            raw_views=("cosine", "dot"),
            norms=True,
        )
        norms[es.name] = row.pop("norms")
        metrics[es.name] = {k: v for k, v in row.items() if k not in _ROW_INFO}
    return metrics, norms


#: What :func:`~st_magnitude.evaluation.runner.evaluate_model`'s row says about the data, not a metric.
_ROW_INFO = ("dataset", "split", "queries", "corpus", "note", "scored_with", "seconds")
