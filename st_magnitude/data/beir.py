"""Local BEIR folders: loading (BEIR's format, line-checked), validation, and NanoBEIR-style subsampling.

A BEIR folder holds ``corpus.jsonl`` (``_id``, ``title``, ``text``), ``queries.jsonl`` (``_id``, ``text``) and
``qrels/<split>.tsv`` (header ``query-id corpus-id score``; the published files have CRLF line endings).
:func:`load_beir` reads them exactly as BEIR's ``GenericDataLoader`` does (same dictionaries; tested against it),
but checks every line through the trust boundary (:mod:`st_magnitude._trust`): a malformed line (bytes that are not
UTF-8, invalid JSON, NaN, a lone surrogate such as ``"\\ud800"``, an id that is no string) raises an
:class:`~st_magnitude._trust.InputFileError` (a ``ValueError``) naming the file, its line number and what was
expected (``GenericDataLoader`` reports only the position inside the line). Blank lines are skipped, ids are read
as strings, a qrels file without a header row keeps its first row, and judged queries with empty text are reported
with a warning (they are still scored: an empty query is a real, if degenerate, input).

Subsampling (:func:`subsample`) follows NanoBEIR's recipe: keep a seeded subset of the queries, *all* their judged
documents, and fill the corpus up to ``max_corpus`` with a fixed seeded sample of the remaining documents
(distractors). Every subsampled dataset carries a human-readable ``note`` that evaluation output prints.
"""

from __future__ import annotations

import csv
import logging
import os
import random
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from st_magnitude._trust import InputFileError, parse_json_line
from st_magnitude._trust.lines import iter_lines
from st_magnitude.data.text import doc_text  # re-exported: the one title + text join

logger = logging.getLogger(__name__)

__all__ = [
    "BEIRData",
    "doc_text",
    "load_beir",
    "positive_pairs",
    "read_corpus",
    "read_qrels",
    "read_queries",
    "subsample",
    "validate_retrieval_data",
]

MISSING_POLICIES = ("raise", "drop")
#: a qrels score is a relevance grade; pytrec_eval stores it in a C int
SCORE_RANGE = (-(2**31), 2**31 - 1)


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
            raise ValueError(
                msg + " Fix the data, or pass on_missing='drop' (evaluate / mteb run: --on-missing drop) to drop them."
            )
        drop_d = set(missing_d)
        qrels = {q: {d: s for d, s in rel.items() if d not in drop_d} for q, rel in qrels.items() if q in queries}
        qrels = {q: rel for q, rel in qrels.items() if rel}
        logger.warning("%s Dropped them; %d queries remain.", msg, len(qrels))
        if not qrels:
            raise ValueError(f"{name}: no judged query is left after dropping missing ids.")
    queries = {q: queries[q] for q in qrels}
    return corpus, queries, qrels


def _jsonl(path: Path, expected: str) -> Iterator[tuple[int, dict]]:
    """Each JSON object of a BEIR JSON Lines file with its line number, every line checked through the trust
    boundary (UTF-8, valid JSON without NaN or lone surrogates, not nested too deeply) and for the BEIR fields."""
    for lineno, line in iter_lines(path):
        if not line.strip():
            continue
        try:
            obj = parse_json_line(line, path, lineno)
        except InputFileError as exc:
            problem = f"{exc.problem}; expected one object per line: {expected}"
            raise InputFileError(path, problem, exc.where or str(lineno)) from None
        where = str(lineno)
        if not isinstance(obj, dict):
            raise InputFileError(path, f"expected a JSON object {expected}, got {type(obj).__name__}", where)
        if obj.get("_id") is None or obj.get("_id") == "":
            raise InputFileError(path, f'no "_id" field; expected {expected}', where)
        if not isinstance(obj["_id"], (str, int)) or isinstance(obj["_id"], bool):
            raise InputFileError(
                path,
                f'"_id" is a {type(obj["_id"]).__name__} ({_short(obj["_id"])}); an id is a string (or an integer), '
                f'e.g. "_id": "doc1". Fix that line ({expected})',
                where,
            )
        for key in ("text", "title"):
            if obj.get(key) is not None and not isinstance(obj[key], str):
                raise InputFileError(
                    path, f'"{key}" is a {type(obj[key]).__name__}, expected a string ({expected})', where
                )
        yield lineno, obj


def _short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _warn_duplicates(path: Path, dups: list[tuple[str, int]]) -> None:
    if dups:
        warnings.warn(
            f"{path}: {len(dups)} duplicate _id(s), the last line wins as in BEIR (first: {dups[0][0]!r} at line "
            f"{dups[0][1]}).",
            UserWarning,
            stacklevel=3,
        )


def read_corpus(path: str | os.PathLike) -> dict[str, dict[str, str | None]]:
    """``corpus.jsonl`` as ``GenericDataLoader`` reads it (``{_id: {"text", "title"}}``), every line checked."""
    path = Path(path)
    corpus: dict[str, dict[str, str | None]] = {}
    dups = []
    for lineno, obj in _jsonl(path, '{"_id": ..., "title": ..., "text": ...}'):
        cid = str(obj["_id"])
        if cid in corpus:
            dups.append((cid, lineno))
        corpus[cid] = {"text": obj.get("text"), "title": obj.get("title")}
    _warn_duplicates(path, dups)
    return corpus


def read_queries(path: str | os.PathLike) -> tuple[dict[str, str | None], dict[str, int]]:
    """``queries.jsonl`` as ``GenericDataLoader`` reads it (``{_id: text}``), plus each id's line number."""
    path = Path(path)
    queries: dict[str, str | None] = {}
    where: dict[str, int] = {}
    dups = []
    for lineno, obj in _jsonl(path, '{"_id": ..., "text": ...}'):
        qid = str(obj["_id"])
        if qid in queries:
            dups.append((qid, lineno))
        queries[qid] = obj.get("text")
        where[qid] = lineno
    _warn_duplicates(path, dups)
    return queries, where


def read_qrels(path: str | os.PathLike) -> dict[str, dict[str, int]]:
    """``qrels/<split>.tsv`` as ``GenericDataLoader`` reads it (``{query_id: {doc_id: score}}``), rows checked.

    The first row is the header (``query-id corpus-id score``) unless its score column is an integer.
    """
    return read_qrels_lines(path)[0]


def read_qrels_lines(path: str | os.PathLike) -> tuple[dict[str, dict[str, int]], dict[tuple[str, str], int]]:
    """:func:`read_qrels` and the line of each ``(query_id, doc_id)`` row (the last one, which wins)."""
    path = Path(path)
    expected = "3 tab-separated columns: query-id, corpus-id, integer score"
    qrels: dict[str, dict[str, int]] = {}
    lines: dict[tuple[str, str], int] = {}
    first = True
    for lineno, line in iter_lines(path):
        if not line.strip():
            continue
        where = str(lineno)
        try:
            row = next(csv.reader([line], delimiter="\t", quoting=csv.QUOTE_MINIMAL))
        except csv.Error as exc:  # a field over csv's size limit, a line break inside a field
            raise InputFileError(path, f"not a row of {expected} ({exc})", where) from None
        if first:
            first = False
            if len(row) >= 3 and not _is_int(row[2]):
                continue  # header
        if len(row) < 3:
            raise InputFileError(path, f"expected {expected}; got {len(row)} column(s): {_short(line.strip())}", where)
        if not _is_int(row[2]):
            raise InputFileError(path, f"score {_short(row[2])} is not an integer; expected {expected}", where)
        if not row[0] or not row[1]:
            raise InputFileError(path, f"empty query-id or corpus-id; expected {expected}", where)
        score = int(row[2])
        if not SCORE_RANGE[0] <= score <= SCORE_RANGE[1]:
            raise InputFileError(
                path,
                f"score {_short(row[2])} is outside {SCORE_RANGE[0]}..{SCORE_RANGE[1]} (a relevance grade)",
                where,
            )
        qrels.setdefault(row[0], {})[row[1]] = score
        lines[row[0], row[1]] = lineno
    return qrels, lines


def _check_qrels_rows(
    folder: Path, split: str, corpus: dict, queries: dict, qrels: dict[str, dict[str, int]], lines: dict
) -> None:
    """Raise naming the first qrels row (file and line) whose document or query id does not exist."""
    file = folder / "qrels" / f"{split}.tsv"
    for (qid, did), lineno in sorted(lines.items(), key=lambda item: item[1]):
        if did not in corpus:
            what, fix = f"corpus-id {did!r} is not in {folder / 'corpus.jsonl'}", "add the document or fix the row"
        elif qid not in queries:
            what, fix = f"query-id {qid!r} is not in {folder / 'queries.jsonl'}", "add the query or fix the row"
        else:
            continue
        n_d = len({d for rel in qrels.values() for d in rel if d not in corpus})
        n_q = len([q for q in qrels if q not in queries])
        raise InputFileError(
            file,
            f"{what} ({n_d} unknown document id(s), {n_q} unknown query id(s) in all); {fix}, or pass "
            "on_missing='drop' (evaluate / mteb run: --on-missing drop) to drop such rows",
            str(lineno),
        )


def _check_some_relevant(file: Path, qrels: dict[str, dict[str, int]], lines: dict) -> None:
    if not any(score > 0 for rel in qrels.values() for score in rel.values()):
        first = min(lines.values(), default=1)
        raise InputFileError(
            file,
            f"no row has a score > 0 ({sum(map(len, qrels.values()))} rows); a judgement counts as relevant only "
            "with a positive score (BEIR, pytrec_eval), so nothing could be retrieved correctly. Fix the score column "
            "(e.g. 1 for relevant)",
            str(first),
        )


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def check_beir_folder(folder: str | os.PathLike, split: str | None = None) -> Path:
    """The file-level checks of :func:`load_beir`, reading nothing: ``folder`` is a folder holding ``corpus.jsonl``,
    ``queries.jsonl`` and (when ``split`` is given) ``qrels/<split>.tsv``. The CLI runs them while it parses its
    arguments, before anything heavy is imported.

    Raises:
        FileNotFoundError: naming the folder and the missing file (and the available splits).
    """
    path = Path(folder)
    if not path.is_dir():
        raise FileNotFoundError(f"BEIR dataset folder {str(path)!r} does not exist or is not a folder.")
    for fname in ("corpus.jsonl", "queries.jsonl"):
        if not (path / fname).is_file():
            raise FileNotFoundError(f"{path} is not a BEIR folder: {fname} is missing.")
    if split is not None and not (path / "qrels" / f"{split}.tsv").is_file():
        raise FileNotFoundError(
            f"{path}: no qrels for split {split!r} (qrels/{split}.tsv). Available splits: "
            f"{_available_splits(path) or 'none'}."
        )
    return path


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
        InputFileError: (a ``ValueError``) a line that is not what BEIR's format holds, an empty corpus, no
            judgements, or missing ids (see :func:`validate_retrieval_data`); the message names the file and line.
    """
    path = check_beir_folder(folder, split)
    if on_missing not in MISSING_POLICIES:
        raise ValueError(f"on_missing must be one of {MISSING_POLICIES}, got {on_missing!r}")
    qrels_file = path / "qrels" / f"{split}.tsv"
    corpus = read_corpus(path / "corpus.jsonl")
    if not corpus:
        raise InputFileError(
            path / "corpus.jsonl", "the corpus is empty (no document line); retrieval evaluation needs at least one"
        )
    queries, query_lines = read_queries(path / "queries.jsonl")
    qrels, qrels_lines = read_qrels_lines(qrels_file)
    if not qrels:
        raise InputFileError(qrels_file, "no relevance judgements (no row after the header)")
    if on_missing == "raise":
        _check_qrels_rows(path, split, corpus, queries, qrels, qrels_lines)
    # GenericDataLoader.load() would KeyError on a judged query missing from queries.jsonl; validate first
    try:
        corpus, queries, qrels = validate_retrieval_data(corpus, queries, qrels, on_missing=on_missing, name=path.name)
    except ValueError as exc:  # nothing left after dropping the rows with unknown ids
        raise InputFileError(qrels_file, str(exc).removeprefix(f"{path.name}: ")) from None
    _check_some_relevant(qrels_file, qrels, qrels_lines)
    empty = [q for q, text in queries.items() if not (text or "").strip()]
    if empty:
        warnings.warn(
            f"{path / 'queries.jsonl'}: {len(empty)} judged quer{'y has' if len(empty) == 1 else 'ies have'} empty "
            f"text (first: {empty[0]!r} at line {query_lines[empty[0]]}); "
            f"{'it is' if len(empty) == 1 else 'they are'} scored as empty strings.",
            UserWarning,
            stacklevel=2,
        )
    corpus = {cid: {"title": doc.get("title") or "", "text": doc.get("text") or ""} for cid, doc in corpus.items()}
    queries = {qid: text or "" for qid, text in queries.items()}  # a query without "text" is scored as "" (warned)
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


def positive_pairs(data: BEIRData) -> list[tuple[str, str]]:
    """Every judged-relevant (query text, document text) pair (grade > 0), queries and documents in id order."""
    return [
        (data.queries[q], doc_text(data.corpus[d]))
        for q in sorted(data.qrels)
        for d, g in sorted(data.qrels[q].items())
        if g > 0
    ]
