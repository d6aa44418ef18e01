"""The training/evaluation data core that ``st-magnitude compare`` and ``st-magnitude replicate`` share.

- :class:`EvalSet` / :func:`load_eval_set`: one BEIR split, NanoBEIR-style subsampled with a fixed seed, its
  queries, corpus and qrels ordered by id (so equal scores rank the same whatever the order of the files);
- :func:`shuffled_pairs`: every judged-relevant (query, document) pair of a split in a seeded order, from which
  both workflows take their training pairs.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from st_magnitude.data.beir import BEIRData, doc_text, load_beir, positive_pairs, subsample

__all__ = ["EvalSet", "load_eval_set", "shuffled_pairs"]


@dataclass
class EvalSet:
    """One evaluation dataset: ``data`` is its (possibly subsampled) split, every dictionary ordered by id."""

    name: str
    data: BEIRData

    @property
    def query_ids(self) -> list[str]:
        return list(self.data.queries)

    @property
    def doc_ids(self) -> list[str]:
        return list(self.data.corpus)

    @cached_property
    def queries(self) -> list[str]:
        """Query texts in :attr:`query_ids` order."""
        return list(self.data.queries.values())

    @cached_property
    def docs(self) -> list[str]:
        """Document texts (title + text, :func:`~st_magnitude.data.doc_text`) in :attr:`doc_ids` order."""
        return [doc_text(d) for d in self.data.corpus.values()]

    @property
    def qrels(self) -> dict[str, dict[str, int]]:
        return self.data.qrels

    @property
    def note(self) -> str:
        """How the split was subsampled, or ``"full test split"``."""
        return self.data.note or "full test split"


def load_eval_set(
    folder: str | Path,
    split: str = "test",
    *,
    max_queries: int | None = None,
    max_corpus: int | None = None,
    seed: int = 0,
    judged_queries_only: bool = False,
    name: str | None = None,
) -> EvalSet:
    """``folder``'s ``split``, subsampled NanoBEIR-style with ``seed`` when a maximum is given, ordered by id.

    ``judged_queries_only`` keeps only the queries with at least one relevant (grade > 0) document.
    """
    folder = Path(folder)
    data = load_beir(folder, split, on_missing="drop")
    if max_corpus or max_queries:
        data = subsample(data, max_corpus=max_corpus, max_queries=max_queries, seed=seed)
    qids = sorted(data.queries)
    if judged_queries_only:
        qids = [q for q in qids if any(g > 0 for g in data.qrels.get(q, {}).values())]
    data = dataclasses.replace(
        data,
        queries={q: data.queries[q] for q in qids},
        corpus={d: data.corpus[d] for d in sorted(data.corpus)},
        qrels={q: data.qrels[q] for q in sorted(data.qrels) if not judged_queries_only or q in set(qids)},
    )
    return EvalSet(name or folder.name, data)


def shuffled_pairs(data: BEIRData, seed: int) -> list[tuple[str, str]]:
    """Every judged-relevant (query text, document text) pair (:func:`~st_magnitude.data.beir.positive_pairs`,
    queries and documents in id order), shuffled with ``random.Random(seed)``."""
    pairs = positive_pairs(data)
    random.Random(seed).shuffle(pairs)
    return pairs
