"""Local BEIR loading (GenericDataLoader + validation) and NanoBEIR-style subsampling."""

from __future__ import annotations

import json

import pytest
from helpers.toy_beir import write_toy_beir
from hypothesis import given, settings
from hypothesis import strategies as st

from st_magnitude.data.beir import load_beir, subsample


def test_load_reads_crlf_qrels_and_keeps_only_judged_queries(toy):
    # Given a BEIR folder with CRLF qrels, When loaded, Then ids are clean and grades parsed
    data = load_beir(toy)
    assert len(data.corpus) == 24 and len(data.queries) == 6
    assert data.qrels["q0"] == {"d0": 1, "d1": 2}
    assert all("\r" not in d for rel in data.qrels.values() for d in rel)
    assert data.corpus["d3"]["title"] == "study 3"


def test_missing_folder_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_beir(tmp_path / "nope")


def test_missing_split_lists_available_splits(toy):
    with pytest.raises(FileNotFoundError, match=r"Available splits: \['test'\]"):
        load_beir(toy, split="dev")


def test_empty_corpus_is_a_clear_error(toy):
    (toy / "corpus.jsonl").write_text("")
    with pytest.raises(ValueError, match="corpus is empty"):
        load_beir(toy)


def test_qrels_ids_missing_from_corpus_raise_or_drop(toy, caplog):
    with open(toy / "qrels" / "test.tsv", "a", newline="") as f:
        f.write("q0\tghost-doc\t1\r\nq9\td0\t1\r\n")
    with pytest.raises(
        ValueError, match=r"test\.tsv:14: corpus-id 'ghost-doc' is not in .*corpus\.jsonl \(1 unknown document id"
    ):
        load_beir(toy)
    data = load_beir(toy, on_missing="drop")
    assert "ghost-doc" not in data.qrels["q0"] and "q9" not in data.qrels
    assert "Dropped them" in caplog.text


def test_bad_policy_names_allowed_values(toy):
    with pytest.raises(ValueError, match=r"\('raise', 'drop'\)"):
        load_beir(toy, on_missing="ignore")


def test_subsample_keeps_all_positives_and_is_seeded(toy):
    data = load_beir(toy)
    a = subsample(data, max_corpus=15, max_queries=3, seed=1)
    b = subsample(data, max_corpus=15, max_queries=3, seed=1)
    assert a.corpus.keys() == b.corpus.keys() and a.queries.keys() == b.queries.keys()
    assert len(a.corpus) == 15 and len(a.queries) == 3
    for rel in a.qrels.values():
        assert set(rel) <= set(a.corpus)
    assert "subsampled" in a.note and "seed 1" in a.note


@settings(max_examples=25, deadline=None)
@given(max_corpus=st.integers(1, 40), max_queries=st.integers(1, 8), seed=st.integers(0, 5))
def test_subsample_properties(tmp_path_factory, max_corpus, max_queries, seed):
    folder = tmp_path_factory.getbasetemp() / "toy_prop"
    if not folder.exists():
        write_toy_beir(folder)
    data = load_beir(folder)
    sub = subsample(data, max_corpus=max_corpus, max_queries=max_queries, seed=seed)
    judged = {d for rel in sub.qrels.values() for d in rel}
    assert judged <= set(sub.corpus)  # every positive of a kept query is kept
    assert len(sub.corpus) == max(len(judged), min(max_corpus, len(data.corpus)))
    assert len(sub.queries) == min(max_queries, len(data.queries))


def test_subsample_rejects_non_positive_sizes(toy):
    with pytest.raises(ValueError, match="max_corpus must be a positive integer"):
        subsample(load_beir(toy), max_corpus=0)


def test_judged_query_without_text(toy):
    with open(toy / "queries.jsonl", "w") as f:
        f.write(json.dumps({"_id": "q0", "text": "x"}) + "\n")
    with pytest.raises(ValueError, match=r"test\.tsv:\d+: query-id 'q1' is not in .*queries\.jsonl"):
        load_beir(toy)
