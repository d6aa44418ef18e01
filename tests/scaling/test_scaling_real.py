"""Real all-MiniLM-L6-v2 + SciFact (slow): identity projection keeps the model; CE ranks dimensions sensibly."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch

pytestmark = pytest.mark.slow


def _scifact_subset(beir_dir, n_queries=10, n_distractors=80, seed=0):
    folder = beir_dir / "scifact"
    corpus = {}
    with open(folder / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            corpus[rec["_id"]] = (rec["title"] + " " + rec["text"]).strip()
    queries = {}
    with open(folder / "queries.jsonl", encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            queries[rec["_id"]] = rec["text"]
    qrels: dict[str, dict[str, int]] = {}
    with open(folder / "qrels" / "test.tsv", encoding="utf-8") as fh:
        next(fh)
        for line in fh:
            q, d, r = line.rstrip("\r\n").split("\t")
            qrels.setdefault(q, {})[d] = int(r)
    rng = random.Random(seed)
    qids = sorted(rng.sample(sorted(qrels), n_queries))
    keep = {d for q in qids for d in qrels[q]}
    keep |= set(rng.sample(sorted(set(corpus) - keep), n_distractors))
    return {d: corpus[d] for d in keep}, {q: queries[q] for q in qids}, {q: qrels[q] for q in qids}


def test_minilm_projection_and_contrastive_entropy(minilm_dir, beir_dir, tmp_path):
    from sentence_transformers import SentenceTransformer

    from st_magnitude.evaluation.entropy import ContrastiveEntropyEvaluator
    from st_magnitude.modules.dimension_projection import add_dimension_projection

    torch.set_num_threads(1)
    corpus, queries, qrels = _scifact_subset(beir_dir)
    base = SentenceTransformer(str(minilm_dir), device="cpu")
    base.max_seq_length = 128
    ev = ContrastiveEntropyEvaluator(queries, corpus, qrels, n_negatives=64, scale=50.0, seed=0)
    ce_base = ev(base)["contrastive_entropy"]
    assert ce_base < 0.5 * math.log(65)  # far better than chance (uniform scores give log(1 + 64))

    # identity init, 384 -> 768: zero-padding before Normalize, so the model scores exactly as before
    padded = SentenceTransformer(str(minilm_dir), device="cpu")
    padded.max_seq_length = 128
    add_dimension_projection(padded, 768, init="identity")
    sample = list(queries.values())[:4]
    a, b = base.encode(sample, convert_to_tensor=True), padded.encode(sample, convert_to_tensor=True)
    torch.testing.assert_close(b[:, :384], a, rtol=1e-5, atol=1e-6)
    assert torch.all(b[:, 384:] == 0)
    padded.save(str(tmp_path / "m"))
    reloaded = SentenceTransformer(str(tmp_path / "m"), device="cpu")
    torch.testing.assert_close(reloaded.encode(sample, convert_to_tensor=True), b, rtol=0, atol=1e-6)

    # a random 8-dim bottleneck loses information: contrastive entropy must get worse
    narrow = SentenceTransformer(str(minilm_dir), device="cpu")
    narrow.max_seq_length = 128
    add_dimension_projection(narrow, 8, init="orthogonal", seed=0)
    assert ev(narrow)["contrastive_entropy"] > ce_base + 0.1
