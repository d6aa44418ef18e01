"""Related-chunk batching for RevelaLoss: chunking, BM25 grouping, the group batch sampler and the LM collator."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from st_magnitude.data.bm25 import bm25_scores
from st_magnitude.data.revela import (
    RevelaDataCollator,
    RevelaGroupBatchSampler,
    build_revela_dataset,
    chunk_text,
    first_half,
    randomize_groups,
    split_sentences,
)

_words = st.text(alphabet="abcdefgh", min_size=1, max_size=6)
_sentence = st.lists(_words, min_size=1, max_size=40).map(lambda ws: " ".join(ws).capitalize() + ".")


@settings(max_examples=60, deadline=None)
@given(sentences=st.lists(_sentence, min_size=1, max_size=12), max_words=st.integers(3, 50))
def test_chunks_respect_limit_and_keep_every_word(sentences, max_words):
    text = " ".join(sentences)
    chunks = chunk_text(text, max_words)
    assert all(1 <= len(c.split()) <= max_words for c in chunks)
    assert " ".join(chunks).split() == text.split()  # nothing lost, order kept


def test_chunks_are_made_of_complete_sentences():
    sentences = [f"Sentence number {i} has exactly seven words." for i in range(10)]
    chunks = chunk_text(" ".join(sentences), max_words=20)
    assert [len(c.split()) for c in chunks] == [14, 14, 14, 14, 14]  # two 7-word sentences per chunk, never cut
    assert all(c.endswith(".") for c in chunks)
    assert split_sentences("A b. C d! E f? g h.") == ["A b.", "C d!", "E f? g h."]
    with pytest.raises(ValueError, match="max_words"):
        chunk_text("a b", 0)


def test_first_half():
    assert first_half("a b c d e") == "a b c"
    assert first_half("a b c d") == "a b"
    assert first_half("a") == "a"


def bm25_reference(docs, k1=0.9, b=0.4):
    import re

    toks = [re.findall(r"\w+", d.lower()) for d in docs]
    n = len(docs)
    avgdl = sum(len(t) for t in toks) / n
    df = Counter(w for t in toks for w in set(t))
    out = np.zeros((n, n))
    for qi, q in enumerate(toks):
        for di, d in enumerate(toks):
            tf = Counter(d)
            for w in set(q):
                if tf[w] == 0:
                    continue
                idf = math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5))
                out[qi, di] += idf * tf[w] * (k1 + 1) / (tf[w] + k1 * (1 - b + b * len(d) / avgdl))
    return out


def test_bm25_matches_brute_force(sentences):
    docs = sentences + ["the the the protein cell", "Coffee, TEA and more coffee"]
    np.testing.assert_allclose(bm25_scores(docs), bm25_reference(docs), rtol=1e-5, atol=1e-6)


TOPICS = {
    "heart": "Heart disease risk rises with blood pressure. Cardiac muscle weakens over time. "
    "Statins lower heart attack risk. Blood cholesterol matters for the heart.",
    "sleep": "Sleep deprivation harms memory. The brain consolidates memory during sleep. "
    "Insomnia patients show poor sleep quality. Caffeine disrupts sleep onset.",
    "diet": "Dietary fiber improves gut health. Vegetables and fruit provide fiber. "
    "A diet rich in fiber lowers sugar spikes. Whole grain fiber aids digestion.",
}


def topic_corpus():
    corpus = {}
    for topic, text in TOPICS.items():
        for k in range(3):
            corpus[f"{topic}{k}"] = {"title": f"{topic} study {k}", "text": text}
    order = sorted(corpus, key=lambda d: (int(d[-1]), d))  # interleave topics so corpus order is unrelated
    return {d: corpus[d] for d in order}


def test_bm25_groups_keep_topics_together():
    ds = build_revela_dataset(topic_corpus(), group_size=3, max_words=12, min_words=3, grouping="bm25", seed=1)
    assert set(ds.column_names) == {"query", "passage", "label"}
    labels = ds["label"]
    sizes = Counter(labels)
    assert set(sizes.values()) == {3}
    # rows of one group are contiguous
    assert labels == sorted(labels)
    for gid in sizes:
        passages = [p for p, g in zip(ds["passage"], labels, strict=True) if g == gid]
        topics = {next(t for t, text in TOPICS.items() if p.split()[0] in text) for p in passages}
        assert len(topics) == 1, passages
    for q, p in zip(ds["query"], ds["passage"], strict=True):
        assert p.startswith(q) and len(q.split()) == math.ceil(len(p.split()) / 2)


def test_sequential_grouping_interleaves_a_window():
    corpus = [
        "A1 one. A1 two. A1 three.",
        "B1 one. B1 two. B1 three.",
    ]
    ds = build_revela_dataset(corpus, group_size=3, max_words=2, min_words=1, grouping="sequential", window=2)
    assert len(ds) == 6 and Counter(ds["label"]) == {0: 3, 1: 3}
    first = set(ds["passage"][:3])
    assert first == {"A1 one.", "B1 one.", "A1 two."}  # d_11, d_21, d_12 (shuffled within the group)


def topic_of(passage: str) -> str:
    return next(t for t, text in TOPICS.items() if passage.split()[0] in text)


def test_random_grouping_is_a_seeded_shuffle_of_all_chunks():
    corpus = topic_corpus()
    kwargs = dict(group_size=3, max_words=12, min_words=3)
    ds = build_revela_dataset(corpus, grouping="random", seed=3, **kwargs)
    from st_magnitude.data.revela import _as_texts

    chunks = [c for text in _as_texts(corpus) for c in chunk_text(text, 12) if len(c.split()) >= 3]
    assert len(ds) == len(chunks) // 3 * 3 and Counter(ds["passage"]) <= Counter(chunks)
    assert set(Counter(ds["label"]).values()) == {3} and ds["label"] == sorted(ds["label"])
    mixed = [
        len({topic_of(p) for p, g in zip(ds["passage"], ds["label"]) if g == gid}) > 1 for gid in set(ds["label"])
    ]
    assert sum(mixed) > len(mixed) / 2  # unlike BM25 groups (test above), most random groups mix topics
    again = build_revela_dataset(corpus, grouping="random", seed=3, **kwargs)
    assert again["passage"] == ds["passage"]
    assert build_revela_dataset(corpus, grouping="random", seed=4, **kwargs)["passage"] != ds["passage"]
    assert len(build_revela_dataset(corpus, grouping="random", max_groups=2, **kwargs)) == 6


def test_randomize_groups_keeps_the_chunks_and_group_sizes():
    bm25 = build_revela_dataset(topic_corpus(), group_size=3, max_words=12, min_words=3, grouping="bm25", seed=1)
    control = randomize_groups(bm25, seed=0)
    assert sorted(zip(control["query"], control["passage"])) == sorted(zip(bm25["query"], bm25["passage"]))
    assert Counter(control["label"]) == Counter(bm25["label"]) and control["label"] == sorted(control["label"])
    groups = {g: {topic_of(p) for p, lab in zip(control["passage"], control["label"]) if lab == g} for g in range(6)}
    assert any(len(topics) > 1 for topics in groups.values())  # BM25 groups were single-topic
    assert randomize_groups(bm25, seed=0)["passage"] == control["passage"]
    assert randomize_groups(bm25, seed=1)["passage"] != control["passage"]
    assert len(list(RevelaGroupBatchSampler(control, batch_size=3))) == len(set(control["label"]))
    with pytest.raises(ValueError, match="group-id column"):
        randomize_groups(bm25.remove_columns("label"))
    with pytest.raises(ValueError, match="same size"):
        randomize_groups(bm25.select(range(len(bm25) - 1)))


def test_build_rejects_bad_arguments():
    with pytest.raises(ValueError, match="grouping must be one of"):
        build_revela_dataset(["a b c"], grouping="topic")
    with pytest.raises(ValueError, match="group_size must be >= 3"):
        build_revela_dataset(["a b c"], group_size=2)
    with pytest.raises(ValueError, match="no complete group"):
        build_revela_dataset(["a b c d e f g h i"], group_size=4, min_words=1)


def test_sampler_yields_whole_groups_shuffled_per_epoch():
    from datasets import Dataset

    labels = [g for g in range(5) for _ in range(4)]
    ds = Dataset.from_dict(
        {"query": [str(i) for i in range(20)], "passage": [str(i) for i in range(20)], "label": labels}
    )
    sampler = RevelaGroupBatchSampler(ds, batch_size=4, drop_last=False, valid_label_columns=["label"], seed=3)
    batches = list(sampler)
    assert len(batches) == len(sampler) == 5
    assert sorted(i for b in batches for i in b) == list(range(20))
    for batch in batches:
        assert len({labels[i] for i in batch}) == 1
    sampler.set_epoch(1)
    assert list(sampler) != batches  # a new order each epoch
    with pytest.raises(ValueError, match="exactly batch_size=5"):
        RevelaGroupBatchSampler(ds, batch_size=5, drop_last=False, valid_label_columns=["label"])
    with pytest.raises(ValueError, match="group-id column"):
        RevelaGroupBatchSampler(
            ds.remove_columns("label"), batch_size=4, drop_last=False, valid_label_columns=["label"]
        )


def test_collator_adds_lm_tokens_as_third_feature(tiny_model, tiny_bert_dir):
    from sentence_transformers import SentenceTransformerTrainer
    from transformers import AutoTokenizer

    lm_tok = AutoTokenizer.from_pretrained(str(tiny_bert_dir))
    collator = RevelaDataCollator(preprocess_fn=tiny_model.preprocess, lm_tokenizer=lm_tok, lm_max_length=5)
    rows = [
        {"query": "the protein", "passage": "the protein increase in cancer cell", "label": 0},
        {"query": "coffee", "passage": "coffee tea", "label": 0},
        {"query": "fish fat", "passage": "fish fat acid brain", "label": 0},
    ]
    batch = collator(rows)
    features, labels = SentenceTransformerTrainer.collect_features(None, batch)
    assert len(features) == 3 and torch.equal(labels, torch.zeros(3, dtype=torch.long))
    lm = features[2]
    assert lm["input_ids"].shape == (3, 5)
    expected = [lm_tok(r["passage"], truncation=True, max_length=5)["input_ids"] for r in rows]
    for row, ids in enumerate(expected):
        n = len(ids)
        assert lm["input_ids"][row, :n].tolist() == ids
        assert lm["attention_mask"][row].tolist() == [1] * n + [0] * (5 - n)
    with pytest.raises(ValueError, match="lm_tokenizer"):
        RevelaDataCollator(preprocess_fn=tiny_model.preprocess)
    with pytest.raises(ValueError, match="'passage'"):
        collator([{"query": "a", "text": "b"}])


@pytest.mark.slow
def test_bm25_groups_on_scifact_are_topical(minilm_dir, beir_dir):
    """Real data: chunks grouped by BM25 are closer to each other (MiniLM cosine) than chunks of random groups."""
    import json

    from sentence_transformers import SentenceTransformer

    corpus = {}
    with open(beir_dir / "scifact" / "corpus.jsonl", encoding="utf-8") as fh:
        for line, _ in zip(fh, range(150), strict=False):
            doc = json.loads(line)
            corpus[doc["_id"]] = {"title": doc["title"], "text": doc["text"]}
    ds = build_revela_dataset(corpus, group_size=8, grouping="bm25", max_groups=6, seed=0)
    assert all(len(p.split()) <= 120 for p in ds["passage"])
    model = SentenceTransformer(str(minilm_dir), device="cpu")
    emb = model.encode(ds["passage"], convert_to_tensor=True, normalize_embeddings=True)
    labels = torch.tensor(ds["label"])
    sims = emb @ emb.T
    same = (labels[:, None] == labels[None, :]) & ~torch.eye(len(labels), dtype=torch.bool)
    within = sims[same].mean()
    shuffled = labels[torch.randperm(len(labels), generator=torch.Generator().manual_seed(0))]
    same_random = (shuffled[:, None] == shuffled[None, :]) & ~torch.eye(len(labels), dtype=torch.bool)
    assert within > sims[same_random].mean() + 0.1, (float(within), float(sims[same_random].mean()))
