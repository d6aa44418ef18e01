"""Hostile BEIR data: each error names the file, the line and the fix; nothing is silently dropped or renamed.

Before: a qrels row naming an unknown document was an error without a line (and in ``compare --train-data`` only a
warning, the row dropped); a BOM at the start of a headerless qrels file made the first query id ``'\\ufeff1'`` (then
reported as a missing query); all scores <= 0 surfaced as "relevant_docs is empty"; ``"_id": ["a"]`` became the id
``"['a']"``. A 20 MB corpus on one line is either read (one huge document) or refused with its line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.toy_beir import write_toy_beir

from st_magnitude.cli import main
from st_magnitude.data.beir import load_beir


@pytest.fixture
def toy(tmp_path) -> Path:
    return write_toy_beir(tmp_path / "toy", n_docs=12, n_queries=4)


def _qrels(toy: Path, split: str = "test") -> Path:
    return toy / "qrels" / f"{split}.tsv"


def test_unknown_document_names_file_line_and_fix(toy, tiny_model, tmp_path, capsys):
    lines = _qrels(toy).read_text().splitlines()
    lines.insert(3, "q1\tghost\t1")
    _qrels(toy).write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"test\.tsv:4: corpus-id 'ghost' is not in .*on_missing='drop'"):
        load_beir(toy)
    tiny_model.save(str(tmp_path / "m"))
    assert main(["evaluate", str(tmp_path / "m"), "--data", str(toy)]) == 2
    err = capsys.readouterr().err
    assert "test.tsv:4: corpus-id 'ghost'" in err and "--on-missing drop" in err


def test_compare_train_data_with_an_unknown_document_is_an_error(toy, tiny_model, tmp_path, capsys):
    write_toy_beir(toy, n_docs=12, n_queries=4, split="train", seed=1)
    with open(_qrels(toy, "train"), "a") as f:
        f.write("q0\tghost\t1\n")
    n = len(_qrels(toy, "train").read_text().splitlines())
    tiny_model.save(str(tmp_path / "m"))
    argv = ["compare", "--model", str(tmp_path / "m"), "--variants", "cosine", "--train-data", str(toy)]
    argv += ["--eval-data", str(toy), "--output", str(tmp_path / "out"), "--steps", "1", "--no-kappa"]
    assert main([*argv, "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert f"train.tsv:{n}: corpus-id 'ghost' is not in" in err and "Traceback" not in err, err


@pytest.mark.parametrize("header", [False, True])
def test_a_bom_is_not_part_of_the_first_id(toy, header):
    clean = load_beir(toy).qrels
    rows = [r for r in _qrels(toy).read_text().splitlines() if not r.startswith("query-id")]
    text = ("query-id\tcorpus-id\tscore\n" if header else "") + "\n".join(rows) + "\n"
    _qrels(toy).write_bytes(b"\xef\xbb\xbf" + text.encode())
    for name in ("corpus.jsonl", "queries.jsonl"):
        (toy / name).write_bytes(b"\xef\xbb\xbf" + (toy / name).read_bytes())
    data = load_beir(toy)
    assert data.qrels == clean and all(not q.startswith("\ufeff") for q in data.queries)
    assert all(not d.startswith("\ufeff") for d in data.corpus)


def test_all_scores_non_positive_names_the_file_and_the_fix(toy):
    rows = _qrels(toy).read_text().splitlines()
    zeroed = [rows[0]] + ["\t".join([*r.split("\t")[:2], "0"]) for r in rows[1:]]
    _qrels(toy).write_text("\n".join(zeroed) + "\n")
    with pytest.raises(ValueError, match=r"test\.tsv:2: no row has a score > 0 .*Fix the score column"):
        load_beir(toy)


@pytest.mark.parametrize("file", ["corpus.jsonl", "queries.jsonl"])
@pytest.mark.parametrize("bad", [["a"], {"x": 1}, 1.5, True])
def test_an_id_that_is_no_string_is_refused_with_its_line(toy, file, bad):
    lines = (toy / file).read_text().splitlines()
    obj = json.loads(lines[1])
    obj["_id"] = bad
    lines[1] = json.dumps(obj)
    (toy / file).write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=rf'{file}:2: "_id" is a {type(bad).__name__} .*an id is a string'):
        load_beir(toy)


def test_an_integer_id_is_read_as_its_string(toy):
    lines = (toy / "corpus.jsonl").read_text().splitlines()
    obj = json.loads(lines[0])
    obj["_id"] = 7
    lines[0] = json.dumps(obj)
    (toy / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    assert "7" in load_beir(toy, on_missing="drop").corpus


def _big_text(n_bytes: int = 20_000_000) -> str:
    words = "protein gene cell diet vitamin heart blood sleep memory coffee".split()
    return " ".join(words[i % len(words)] for i in range(n_bytes // 6))


def test_a_20_mb_corpus_on_one_line_is_read_or_refused_with_its_line(toy):
    docs = [json.loads(line) for line in (toy / "corpus.jsonl").read_text().splitlines()]
    docs[0]["text"] = _big_text()
    (toy / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    assert len(load_beir(toy).corpus["d0"]["text"]) > 19_000_000  # one 20 MB document: read whole
    one_line = "".join(json.dumps(d) for d in docs)  # every document on one 20 MB line, no newline
    (toy / "corpus.jsonl").write_text(one_line)
    with pytest.raises(ValueError, match=r"corpus\.jsonl:1: not valid JSON \(Extra data, column \d+\); expected one"):
        load_beir(toy)
    (toy / "corpus.jsonl").write_text(json.dumps(docs))  # a JSON array on one line
    with pytest.raises(ValueError, match=r"corpus\.jsonl:1: expected a JSON object"):
        load_beir(toy)


@pytest.mark.slow  # tokenizes a 20 MB document: ~30 CPU-s and ~2.7 GB peak RSS on the 2-core machine
def test_evaluate_scores_a_20_mb_document(toy, tiny_model, tmp_path, capsys):
    docs = [json.loads(line) for line in (toy / "corpus.jsonl").read_text().splitlines()]
    docs[0]["text"] = _big_text()
    (toy / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    tiny_model.save(str(tmp_path / "m"))
    assert main(["evaluate", str(tmp_path / "m"), "--data", str(toy)]) == 0
    assert "ndcg@10" in capsys.readouterr().out
