"""Moved to :mod:`st_magnitude.data.revela` (BM25 to :mod:`st_magnitude.data.bm25`); this path is a shim."""

from __future__ import annotations

from st_magnitude._lazy import moved_exports

__getattr__, __dir__ = moved_exports(
    __name__,
    {
        **dict.fromkeys(
            (
                "GROUPINGS",
                "RevelaDataCollator",
                "RevelaGroupBatchSampler",
                "build_revela_dataset",
                "chunk_text",
                "first_half",
                "randomize_groups",
                "split_sentences",
            ),
            "st_magnitude.data.revela",
        ),
        "bm25_scores": "st_magnitude.data.bm25",
    },
)
