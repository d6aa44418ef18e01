"""The comparison's evaluation sets: each dataset's (possibly subsampled) test split, scored for every run."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from st_magnitude.experiments.config import CompareConfig

logger = logging.getLogger(__name__)

__all__ = ["EvalSet", "load_eval_sets", "evaluate_sets"]


@dataclass
class EvalSet:
    """One evaluation dataset of the comparison: its (possibly subsampled) test split, ids in sorted order."""

    name: str
    data: Any  # BEIRData, its dictionaries ordered by id

    @property
    def query_ids(self) -> list[str]:
        return list(self.data.queries)

    @property
    def doc_ids(self) -> list[str]:
        return list(self.data.corpus)


def load_eval_sets(folders: dict[str, Path], config: CompareConfig) -> list[EvalSet]:
    """Each folder's test split, NanoBEIR-style subsampled by the config, with queries, corpus and qrels ordered by
    id (so equal scores rank the same whatever the order of the files)."""
    from st_magnitude.integrations.data import load_beir, subsample

    sets = []
    for name, folder in folders.items():
        data = load_beir(folder, "test", on_missing="drop")
        if config.max_corpus or config.max_queries:
            data = subsample(
                data, max_corpus=config.max_corpus, max_queries=config.max_queries, seed=config.subsample_seed
            )
        data = dataclasses.replace(
            data,
            queries={q: data.queries[q] for q in sorted(data.queries)},
            corpus={d: data.corpus[d] for d in sorted(data.corpus)},
            qrels={q: data.qrels[q] for q in sorted(data.qrels)},
        )
        sets.append(EvalSet(name, data))
    return sets


def evaluate_sets(model, eval_sets: list[EvalSet], batch_size: int = 64) -> tuple[dict[str, dict], dict[str, dict]]:
    """``(metrics, norms)`` per dataset: :func:`st_magnitude.integrations.evaluate.evaluate_model` with the model's
    own similarity, plus what the comparison records — per-query nDCG@10 (``PER_QUERY_KEY``), the dual cosine/dot
    view of the raw embeddings and their norms (for the histograms)."""
    from st_magnitude.integrations.evaluate import evaluate_model

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


#: What :func:`~st_magnitude.integrations.evaluate.evaluate_model`'s row says about the data, not a metric.
_ROW_INFO = ("dataset", "split", "queries", "corpus", "note", "scored_with", "seconds")
