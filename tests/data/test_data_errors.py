"""Data-loading errors name the file, the line and what was expected."""

from __future__ import annotations

import json

import pytest

from st_magnitude.data.beir import load_beir, read_corpus, read_qrels, read_queries
from st_magnitude.evaluation.runner import evaluate_folders

pytestmark = pytest.mark.toy_beir(n_docs=60, n_queries=6)


def _replace_line(path, lineno: int, text: str) -> None:
    lines = path.read_text().splitlines(keepends=True)
    lines[lineno - 1] = text
    path.write_text("".join(lines))


@pytest.mark.parametrize(
    "fname, lineno, text, message",
    [
        ("corpus.jsonl", 51, '{"_id": "d50", "text": "broken\n', r"corpus\.jsonl:51: not valid JSON"),
        ("corpus.jsonl", 51, '{"title": "t", "text": "x"}\n', r'corpus\.jsonl:51: no "_id" field; expected \{"_id"'),
        ("corpus.jsonl", 7, '["d6", "text"]\n', r"corpus\.jsonl:7: expected a JSON object"),
        ("corpus.jsonl", 8, '{"_id": "d7", "text": 3}\n', r'corpus\.jsonl:8: "text" is a int, expected a string'),
        ("queries.jsonl", 4, "not json\n", r"queries\.jsonl:4: not valid JSON"),
        ("queries.jsonl", 2, '{"text": "no id"}\n', r'queries\.jsonl:2: no "_id" field'),
        ("qrels/test.tsv", 5, "q1 d2 1\r\n", r"test\.tsv:5: expected 3 tab-separated columns"),
        ("qrels/test.tsv", 6, "q2\td4\thigh\r\n", r"test\.tsv:6: score 'high' is not an integer"),
    ],
)
def test_malformed_line_names_file_line_and_expectation(toy, fname, lineno, text, message):
    _replace_line(toy / fname, lineno, text)
    with pytest.raises(ValueError, match=message) as info:
        load_beir(toy)
    assert str(toy / fname) in str(info.value)


def test_invalid_utf8_names_its_line(toy):
    with open(toy / "corpus.jsonl", "ab") as f:
        f.write(b'{"_id": "x", "text": "\xff"}\n')
    with pytest.raises(ValueError, match=r"corpus\.jsonl:61: byte 0xff \(byte 23 of the line\) is not UTF-8"):
        load_beir(toy)


def test_reads_exactly_what_beir_reads(toy):
    from beir.datasets.data_loader import GenericDataLoader

    corpus, queries, qrels = GenericDataLoader(data_folder=str(toy)).load(split="test")  # public API only
    assert read_corpus(toy / "corpus.jsonl") == corpus
    assert {q: t for q, t in read_queries(toy / "queries.jsonl")[0].items() if q in qrels} == queries
    assert read_qrels(toy / "qrels" / "test.tsv") == qrels


def test_blank_lines_are_skipped_and_a_headerless_qrels_keeps_its_first_row(toy):
    with open(toy / "corpus.jsonl", "a") as f:
        f.write("\n\n")
    (toy / "qrels" / "test.tsv").write_text("q0\td0\t1\nq1\td2\t1\n")
    data = load_beir(toy)
    assert data.qrels == {"q0": {"d0": 1}, "q1": {"d2": 1}}


def test_empty_query_text_warns_with_its_line(toy):
    _replace_line(toy / "queries.jsonl", 3, json.dumps({"_id": "q2", "text": "  "}) + "\n")
    with pytest.warns(UserWarning, match=r"queries\.jsonl: 1 judged query has empty text \(first: 'q2' at line 3\)"):
        load_beir(toy)


def test_max_corpus_zero_is_refused_not_unlimited(toy, tiny_model):
    for kwargs in ({"max_corpus": 0}, {"max_queries": 0}):
        with pytest.raises(ValueError, match="must be a positive integer"):
            evaluate_folders(tiny_model, [toy], **kwargs)


def test_python_api_refuses_tn_for_rescoring_before_any_work(tmp_path, tiny_model):
    from st_magnitude.similarity import TNSimilarity

    with pytest.raises(ValueError, match="'tn' cannot rescore raw embeddings"):
        evaluate_folders(tiny_model, [tmp_path / "not-even-read"], similarity="tn")
    with pytest.raises(ValueError, match="cannot rescore"):
        evaluate_folders(tiny_model, [tmp_path / "not-even-read"], similarity=TNSimilarity())
