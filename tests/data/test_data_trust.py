"""BEIR corpora, queries and qrels are read through the trust boundary: every refusal is one ``InputFileError``
naming the file and the line, and any mutation of a valid folder either loads or is such an error.

Before: a lone surrogate (``"\\ud800"``) in a corpus loaded and ended in the tokenizer's ``TypeError`` traceback
(``evaluate``: exit 1); a line nested 100,000 deep raised ``RecursionError``; a qrels field holding a carriage return
or longer than csv's field limit raised ``csv.Error``; an empty corpus or qrels file was an error naming the dataset,
not the file.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from helpers.mutate import mutate_bytes
from helpers.toy_beir import write_toy_beir
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from st_magnitude._trust import InputFileError
from st_magnitude.cli import main
from st_magnitude.data.beir import load_beir, read_corpus


@pytest.fixture
def toy(tmp_path) -> Path:
    return write_toy_beir(tmp_path / "toy", n_docs=12, n_queries=4)


def _set_line(file: Path, lineno: int, text: str) -> None:
    """Line ``lineno`` (lines end at ``\n`` only, as the readers count them) replaced by ``text``."""
    lines = file.read_bytes().split(b"\n")
    lines[lineno - 1] = text.removesuffix("\n").encode("utf-8")
    file.write_bytes(b"\n".join(lines))


@pytest.mark.parametrize(
    ("fname", "lineno", "line", "message"),
    [
        (
            "corpus.jsonl",
            5,
            r'{"_id": "d4", "text": "bad \ud800 here"}',
            r"corpus\.jsonl:5: key text holds a lone surrogate",
        ),
        (
            "corpus.jsonl",
            3,
            r'{"_id": "d2", "title": "\udfff", "text": "x"}',
            r"corpus\.jsonl:3: key title holds a lone",
        ),
        ("corpus.jsonl", 2, r'{"_id": "d\ud83d", "text": "x"}', r"corpus\.jsonl:2: key _id holds a lone surrogate"),
        ("queries.jsonl", 2, r'{"_id": "q1", "text": "\ud800"}', r"queries\.jsonl:2: key text holds a lone surrogate"),
        ("corpus.jsonl", 4, '{"_id": "d3", "text": NaN}', r"corpus\.jsonl:4: NaN is not a number JSON allows"),
        ("corpus.jsonl", 6, '{"_id": "d5", "m": ' + "[" * 100_000 + "]" * 100_000 + "}", r"corpus\.jsonl:6: nested"),
        (
            "corpus.jsonl",
            6,
            '{"_id": "d5", "m": ' + "[" * 80 + "]" * 80 + "}",
            r"corpus\.jsonl:6: nested deeper than 64",
        ),
    ],
    ids=["text", "title", "id", "query", "nan", "100000-deep", "80-deep"],
)
def test_a_line_the_boundary_refuses_names_file_and_line(toy, fname, lineno, line, message):
    _set_line(toy / fname, lineno, line + "\n")
    with pytest.raises(InputFileError, match=message) as info:
        load_beir(toy)
    assert info.value.file == str(toy / fname) and info.value.where == str(lineno)


def test_a_lone_surrogate_in_a_corpus_is_one_line_from_the_cli(toy, tiny_model, tmp_path, capsys):
    _set_line(toy / "corpus.jsonl", 5, r'{"_id": "d4", "text": "bad \ud800 here"}' + "\n")
    tiny_model.save(str(tmp_path / "m"))
    capsys.readouterr()  # the save's progress bar
    assert main(["evaluate", str(tmp_path / "m"), "--data", str(toy)]) == 2
    err = capsys.readouterr().err
    assert "corpus.jsonl:5: key text holds a lone surrogate" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err


def test_unicode_line_separators_inside_a_string_stay_on_their_line(toy):
    # U+2028, U+0085 and \x0c are line breaks to str.splitlines but ordinary characters in a JSON string
    _set_line(
        toy / "corpus.jsonl", 2, json.dumps({"_id": "d1", "text": "a\u2028b\x85c\x0cd"}, ensure_ascii=False) + "\n"
    )
    _set_line(toy / "corpus.jsonl", 3, '{"_id": "d2", "text": "x",}\n')  # the next line is still line 3
    with pytest.raises(InputFileError, match=r"corpus\.jsonl:3: not valid JSON"):
        load_beir(toy)
    _set_line(toy / "corpus.jsonl", 3, '{"_id": "d2", "text": "x"}\n')
    assert load_beir(toy).corpus["d1"]["text"] == "a\u2028b\x85c\x0cd"


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("q0\td0\r1\t1\r\n", r"test\.tsv:2: not a row of 3 tab-separated columns"),
        ("q0\t" + "d" * 200_000 + "\t1\r\n", r"test\.tsv:2: not a row of .*field larger than field limit"),
        (f"q0\td0\t{2**40}\r\n", r"test\.tsv:2: score '1099511627776' is outside"),
    ],
    ids=["carriage-return-in-a-field", "field-over-csv-limit", "score-beyond-int32"],
)
def test_a_qrels_row_csv_cannot_read_names_its_line(toy, row, message):
    _set_line(toy / "qrels" / "test.tsv", 2, row)
    with pytest.raises(InputFileError, match=message):
        load_beir(toy)


def test_empty_files_are_named(toy):
    qrels = toy / "qrels" / "test.tsv"
    header_only = "query-id\tcorpus-id\tscore\r\n"
    original = qrels.read_text(encoding="utf-8")
    qrels.write_text(header_only, encoding="utf-8", newline="")
    with pytest.raises(InputFileError, match=r"test\.tsv: no relevance judgements"):
        load_beir(toy)
    qrels.write_text(header_only + "q0\tghost\t1\r\n", encoding="utf-8", newline="")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "dropped them"
        with pytest.raises(InputFileError, match=r"test\.tsv: no judged query is left after dropping missing ids"):
            load_beir(toy, on_missing="drop")
    qrels.write_text(original, encoding="utf-8", newline="")
    (toy / "corpus.jsonl").write_text("\n\n", encoding="utf-8")
    with pytest.raises(InputFileError, match=r"corpus\.jsonl: the corpus is empty"):
        load_beir(toy)


def test_a_folder_named_as_a_corpus_file_is_one_error(tmp_path):
    (tmp_path / "corpus.jsonl").mkdir()
    with pytest.raises(InputFileError, match=r"corpus\.jsonl: is not a file"):
        read_corpus(tmp_path / "corpus.jsonl")


# --- property: any byte or line mutation of a valid folder loads or is one InputFileError naming the file ----------

FILES = ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv")
_BYTE = st.tuples(
    st.sampled_from(["set", "insert", "delete", "truncate"]),
    st.floats(min_value=0.0, max_value=1.0, allow_nan=False),
    st.sampled_from([0x00, 0x09, 0x0A, 0x0D, 0x22, 0x5C, 0x7B, 0x7D, 0x80, 0xC3, 0xED, 0xEF, 0xFF])
    | st.integers(min_value=0, max_value=255),
)
_LINE = st.tuples(
    st.sampled_from(["drop", "duplicate", "swap", "replace"]),
    st.floats(min_value=0.0, max_value=1.0, allow_nan=False),
    st.sampled_from(
        [
            "",
            "{}",
            "[]",
            "null",
            '{"_id": null}',
            '{"_id": "\\ud800", "text": "x"}',
            '{"_id": "d0", "text": "\\udc00"}',
            '{"_id": 1e400}',
            '{"_id": "x", "text": Infinity}',
            "q0\td0",
            "q0\td0\tx",
            "q0\tghost\t1",
            "ghost\td0\t1",
            "q0\td0\t-1",
            "\ufeff",
            "\x00",
            '"' * 3,
        ]
    )
    | st.text(max_size=40),
)


def _mutate_lines(raw: bytes, ops) -> bytes:
    lines = raw.split(b"\n")
    for op, where, text in ops:
        i = min(int(where * len(lines)), len(lines) - 1)
        if op == "drop" and len(lines) > 1:
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "swap" and len(lines) > 1:
            j = (i + 1) % len(lines)
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "replace":
            lines[i] = text.encode("utf-8", "surrogatepass")
    return b"\n".join(lines)


@pytest.fixture(scope="module")
def valid_folder(tmp_path_factory) -> dict[str, bytes]:
    folder = write_toy_beir(tmp_path_factory.mktemp("valid") / "toy", n_docs=8, n_queries=3)
    return {name: (folder / name).read_bytes() for name in FILES}


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    target=st.sampled_from(FILES),
    kind=st.sampled_from(["bytes", "lines"]),
    byte_ops=st.lists(_BYTE, min_size=1, max_size=4),
    line_ops=st.lists(_LINE, min_size=1, max_size=3),
    on_missing=st.sampled_from(["raise", "drop"]),
)
def test_any_mutation_of_a_beir_folder_loads_or_names_the_file(
    valid_folder, tmp_path_factory, target, kind, byte_ops, line_ops, on_missing
):
    folder = tmp_path_factory.mktemp("mutated")
    (folder / "qrels").mkdir()
    for name, raw in valid_folder.items():
        if name == target:
            raw = mutate_bytes(raw, byte_ops) if kind == "bytes" else _mutate_lines(raw, line_ops)
        (folder / name).write_bytes(raw)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # duplicate ids, empty query texts: warnings, not errors
            data = load_beir(folder, on_missing=on_missing)
    except InputFileError as exc:
        assert exc.file in {str(folder / name) for name in FILES}, exc
        assert str(exc).startswith(exc.file) and "\n" not in str(exc)
    else:
        # what loads is what the evaluation needs: string ids and texts, integer grades, no dangling judgement
        assert data.corpus and data.qrels
        texts = [t for d in data.corpus.values() for t in d.values()] + list(data.queries.values())
        assert all(isinstance(t, str) for t in texts)
        "".join(texts).encode("utf-8")  # no lone surrogate reached the model (this raises on one)
        assert all(d in data.corpus for rel in data.qrels.values() for d in rel)
        assert all(isinstance(g, int) for rel in data.qrels.values() for g in rel.values())
