"""Local BEIR folders: loading with BEIR's ``GenericDataLoader``, validation, and NanoBEIR-style subsampling.

A BEIR folder holds ``corpus.jsonl`` (``_id``, ``title``, ``text``), ``queries.jsonl`` (``_id``, ``text``) and
``qrels/<split>.tsv`` (header ``query-id corpus-id score``; the published files have CRLF line endings, which the
``csv`` module in ``GenericDataLoader`` handles).

Subsampling (:func:`subsample`) follows NanoBEIR's recipe: keep a seeded subset of the queries, *all* their judged
documents, and fill the corpus up to ``max_corpus`` with a fixed seeded sample of the remaining documents
(distractors). Every subsampled dataset carries a human-readable ``note`` that evaluation output prints.
"""

from __future__ import annotations

import logging
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = ["BEIRData", "doc_text", "load_beir", "subsample", "validate_retrieval_data"]

MISSING_POLICIES = ("raise", "drop")


@dataclass
class BEIRData:
    """An IR dataset in BEIR's in-memory layout.

    Attributes:
        name: dataset name (the folder name for local folders).
        corpus: ``{doc_id: {"title": str, "text": str}}``.
        queries: ``{query_id: text}`` — only queries that have judgements.
        qrels: ``{query_id: {doc_id: grade}}`` (grade > 0 is relevant, as in BEIR / pytrec_eval).
        split: the qrels split.
        note: how the data was subsampled ("" when it is the full split); printed with results.
    """

    name: str
    corpus: dict[str, dict[str, str]]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    split: str = "test"
    note: str = ""
    meta: dict[str, int] = field(default_factory=dict)

    def __repr__(self) -> str:
        return (
            f"BEIRData(name={self.name!r}, split={self.split!r}, corpus={len(self.corpus)}, "
            f"queries={len(self.queries)}, qrels={sum(len(v) for v in self.qrels.values())}"
            + (f", note={self.note!r}" if self.note else "")
            + ")"
        )


def doc_text(doc: dict[str, str] | str, sep: str = " ") -> str:
    """Document text as mteb builds it: ``(title + sep + text).strip()`` (a bare string is returned as is)."""
    if isinstance(doc, str):
        return doc
    title = doc.get("title") or ""
    text = doc.get("text") or ""
    return (title + sep + text).strip() if title else text.strip()


def _available_splits(folder: Path) -> list[str]:
    qdir = folder / "qrels"
    return sorted(p.stem for p in qdir.glob("*.tsv")) if qdir.is_dir() else []


def validate_retrieval_data(
    corpus: dict[str, dict[str, str]],
    queries: dict[str, str],
    qrels: dict[str, dict[str, int]],
    *,
    on_missing: str = "raise",
    name: str = "dataset",
) -> tuple[dict[str, dict[str, str]], dict[str, str], dict[str, dict[str, int]]]:
    """Check that a (corpus, queries, qrels) triple can be evaluated; return it (possibly cleaned).

    Raises ``ValueError`` for an empty corpus, no queries with judgements, or (``on_missing="raise"``) qrels that
    name documents or queries that do not exist. ``on_missing="drop"`` removes those judgements with a warning
    instead, and drops queries left without any judgement.
    """
    if on_missing not in MISSING_POLICIES:
        raise ValueError(f"on_missing must be one of {MISSING_POLICIES}, got {on_missing!r}")
    if not corpus:
        raise ValueError(f"{name}: the corpus is empty; retrieval evaluation needs at least one document.")
    if not qrels:
        raise ValueError(f"{name}: no relevance judgements (qrels are empty).")
    missing_q = sorted(q for q in qrels if q not in queries)
    missing_d = sorted({d for rel in qrels.values() for d in rel if d not in corpus})
    if missing_q or missing_d:
        parts = []
        if missing_d:
            parts.append(f"{len(missing_d)} judged document id(s) missing from the corpus (e.g. {missing_d[:5]})")
        if missing_q:
            parts.append(f"{len(missing_q)} judged query id(s) missing from the queries (e.g. {missing_q[:5]})")
        msg = f"{name}: " + "; ".join(parts) + "."
        if on_missing == "raise":
            raise ValueError(msg + " Fix the data, or pass on_missing='drop' (CLI: --on-missing drop) to drop them.")
        drop_d = set(missing_d)
        qrels = {q: {d: s for d, s in rel.items() if d not in drop_d} for q, rel in qrels.items() if q in queries}
        qrels = {q: rel for q, rel in qrels.items() if rel}
        logger.warning("%s Dropped them; %d queries remain.", msg, len(qrels))
        if not qrels:
            raise ValueError(f"{name}: no judged query is left after dropping missing ids.")
    queries = {q: queries[q] for q in qrels}
    return corpus, queries, qrels


def load_beir(
    folder: str | os.PathLike,
    split: str = "test",
    *,
    on_missing: str = "raise",
) -> BEIRData:
    """Load a local BEIR folder with BEIR's ``GenericDataLoader`` and validate it.

    Args:
        folder: folder with ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv``.
        split: qrels split (e.g. ``test``, ``dev``, ``train``).
        on_missing: ``"raise"`` (default) or ``"drop"``: what to do with judgements whose query or document id is
            not in the files.

    Raises:
        FileNotFoundError: the folder or one of its files does not exist (the message lists the available splits).
        ValueError: empty corpus, no judgements, or missing ids (see :func:`validate_retrieval_data`).
    """
    from beir.datasets.data_loader import GenericDataLoader

    path = Path(folder)
    if not path.is_dir():
        raise FileNotFoundError(f"BEIR dataset folder {str(path)!r} does not exist or is not a folder.")
    for fname in ("corpus.jsonl", "queries.jsonl"):
        if not (path / fname).is_file():
            raise FileNotFoundError(f"{path} is not a BEIR folder: {fname} is missing.")
    if not (path / "qrels" / f"{split}.tsv").is_file():
        raise FileNotFoundError(
            f"{path}: no qrels for split {split!r} (qrels/{split}.tsv). Available splits: "
            f"{_available_splits(path) or 'none'}."
        )
    loader = GenericDataLoader(data_folder=str(path))
    loader._load_corpus()
    loader._load_queries()
    loader.qrels_file = str(path / "qrels" / f"{split}.tsv")
    loader._load_qrels()
    # GenericDataLoader.load() would KeyError on a judged query missing from queries.jsonl; validate first
    corpus, queries, qrels = validate_retrieval_data(
        loader.corpus, loader.queries, loader.qrels, on_missing=on_missing, name=path.name
    )
    corpus = {cid: {"title": doc.get("title") or "", "text": doc.get("text") or ""} for cid, doc in corpus.items()}
    logger.info("Loaded %s/%s: %d docs, %d queries", path.name, split, len(corpus), len(queries))
    return BEIRData(name=path.name, corpus=corpus, queries=queries, qrels=qrels, split=split)


def subsample(
    data: BEIRData,
    max_corpus: int | None = None,
    max_queries: int | None = None,
    seed: int = 42,
) -> BEIRData:
    """NanoBEIR-style subsample: seeded queries, all their judged documents, plus seeded distractors.

    The kept corpus is the union of the judged documents of the kept queries (all of them, whatever ``max_corpus``
    says) and a fixed seeded sample of the other documents, up to ``max_corpus`` in total. The same ``seed`` gives
    the same subset, so different models can be compared on it. Queries are sampled first (``max_queries``); their
    judgements are kept in full.

    Raises:
        ValueError: non-positive sizes.
    """
    for label, v in (("max_corpus", max_corpus), ("max_queries", max_queries)):
        if v is not None and (not isinstance(v, int) or v <= 0):
            raise ValueError(f"{label} must be a positive integer or None, got {v!r}")
    rng = random.Random(seed)
    qids = sorted(data.qrels)
    if max_queries is not None and max_queries < len(qids):
        qids = sorted(rng.sample(qids, max_queries))
    qrels = {q: dict(data.qrels[q]) for q in qids}
    queries = {q: data.queries[q] for q in qids}
    judged = sorted({d for rel in qrels.values() for d in rel if d in data.corpus})
    keep = set(judged)
    if max_corpus is None or max_corpus >= len(data.corpus):
        keep = set(data.corpus)
    elif max_corpus > len(keep):
        rest = sorted(d for d in data.corpus if d not in keep)
        keep.update(random.Random(seed + 1).sample(rest, min(len(rest), max_corpus - len(keep))))
    corpus = {d: data.corpus[d] for d in data.corpus if d in keep}
    n_pos = len(judged)
    note = ""
    if len(corpus) < len(data.corpus) or len(queries) < len(data.queries):
        note = (
            f"subsampled (NanoBEIR-style, seed {seed}): {len(queries)}/{len(data.queries)} queries, "
            f"{len(corpus)}/{len(data.corpus)} docs = {n_pos} judged + {len(corpus) - n_pos} seeded distractors"
        )
        if max_corpus is not None and n_pos > max_corpus:
            note += f" (judged docs alone exceed max_corpus={max_corpus})"
    return BEIRData(
        name=data.name,
        corpus=corpus,
        queries=queries,
        qrels=qrels,
        split=data.split,
        note=note,
        meta={"full_corpus": len(data.corpus), "full_queries": len(data.queries)},
    )
