"""L2Dir on the real all-MiniLM-L6-v2 with a few real NFCorpus train pairs (slow: real model and data)."""

from __future__ import annotations

import copy
import csv

import pytest
import torch
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

from st_magnitude.losses.l2dir import CachedL2DirLoss, L2DirLoss

pytestmark = pytest.mark.slow


def _pairs(beir_dir, n=8):
    import json

    folder = beir_dir / "nfcorpus"
    queries = {}
    with open(folder / "queries.jsonl") as fh:
        for line in fh:
            row = json.loads(line)
            queries[row["_id"]] = row["text"]
    wanted: dict[str, str] = {}
    with open(folder / "qrels" / "train.tsv", newline="") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            if row["query-id"] not in wanted and row["query-id"] in queries:
                wanted[row["query-id"]] = row["corpus-id"]
            if len(wanted) == n:
                break
    docs = {}
    with open(folder / "corpus.jsonl") as fh:
        for line in fh:
            row = json.loads(line)
            if row["_id"] in wanted.values():
                docs[row["_id"]] = f"{row['title']} {row['text']}"
    return [queries[q] for q in wanted], [docs[d] for d in wanted.values()]


def test_l2dir_on_minilm_with_nfcorpus_pairs(minilm_dir, beir_dir):
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(1)
    model = SentenceTransformer(str(minilm_dir), device="cpu").eval()
    model.max_seq_length = 64
    anchors, positives = _pairs(beir_dir)
    features = [dict(model.preprocess(anchors)), dict(model.preprocess(positives))]

    torch.manual_seed(0)
    loss = L2DirLoss(model)  # paper's VLM2Vec-V2 temperatures
    # the encoder default: NAP input = pooled embedding before MiniLM's Normalize, Linear(384, 384)
    assert loss.tap.nap_input == "pre_normalize" and loss.nap_head.in_features == 384
    parts = loss(copy.deepcopy(features))
    total = sum(parts.values())
    total.backward()
    assert torch.isfinite(total)
    assert loss.nap_head.projections["default"].weight.grad.abs().sum() > 0
    stats = loss.last_stats
    assert stats["anchor_norm_mean"] > 0 and stats["length_ratio_mean"] > 0

    # the InfoNCE part is MNRL with scale 1/τ on the real model
    mnrl = MultipleNegativesRankingLoss(model, scale=1 / loss.temperature)(copy.deepcopy(features), None)
    assert float(parts["infonce"].detach()) == pytest.approx(0.5 * float(mnrl.detach()), rel=1e-5)

    # the cached variant gives the same loss
    cached = CachedL2DirLoss(model, nap_head=loss.nap_head, mini_batch_size=4)
    cparts = cached(copy.deepcopy(features))
    for key in parts:
        assert float(cparts[key].detach()) == pytest.approx(float(parts[key].detach()), rel=1e-4)
