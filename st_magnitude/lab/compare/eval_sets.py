"""The comparison's evaluation sets (:mod:`st_magnitude.data.eval_set`, shared with ``replicate``), scored
for every run."""

from __future__ import annotations

import logging
from pathlib import Path

from st_magnitude.data.eval_set import EvalSet, load_eval_set
from st_magnitude.lab.compare.config import CompareConfig

logger = logging.getLogger(__name__)

__all__ = ["load_eval_sets"]


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
