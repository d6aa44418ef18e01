"""The data core compare and replicate share: evaluation sets ordered by id, seeded training pairs."""

from __future__ import annotations

import random

import pytest

from st_magnitude.data.beir import doc_text, load_beir
from st_magnitude.data.eval_set import load_eval_set, shuffled_pairs

pytestmark = pytest.mark.toy_beir(n_docs=24, n_queries=6)


def test_eval_set_is_the_split_in_id_order_and_can_keep_queries_with_a_relevant_document_only(toy):
    # Given a split where every judgement of one query has grade 0
    qrels = toy / "qrels" / "test.tsv"
    lines = qrels.read_text().splitlines()
    qrels.write_text("\n".join(x.rsplit("\t", 1)[0] + "\t0" if x.startswith("q3\t") else x for x in lines) + "\n")
    data = load_beir(toy, "test", on_missing="drop")
    # When loaded with every judged query, and with judged-relevant queries only
    every, judged = load_eval_set(toy), load_eval_set(toy, judged_queries_only=True)
    # Then both are in id order, texts aligned with the ids (an independent rebuild from the loaded split)
    assert every.query_ids == sorted(data.queries) and every.doc_ids == sorted(data.corpus)
    assert every.queries == [data.queries[q] for q in sorted(data.queries)]
    assert every.docs == [doc_text(data.corpus[d]) for d in sorted(data.corpus)]
    positive = sorted(q for q in data.qrels if any(g > 0 for g in data.qrels[q].values()))
    assert judged.query_ids == positive and "q3" not in judged.query_ids and "q3" in data.qrels
    assert judged.qrels == {q: data.qrels[q] for q in positive}
    assert every.name == toy.name and every.note == "full test split"


def test_shuffled_pairs_are_the_positive_pairs_in_a_seeded_order(toy):
    data = load_beir(toy, "test", on_missing="drop")
    reference = [
        (data.queries[q], doc_text(data.corpus[d]))
        for q in sorted(data.qrels)
        for d, g in sorted(data.qrels[q].items())
        if g > 0
    ]
    random.Random(7).shuffle(reference)
    assert shuffled_pairs(data, 7) == reference
    assert shuffled_pairs(data, 7) != shuffled_pairs(data, 8)
