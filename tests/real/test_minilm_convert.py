"""Real all-MiniLM-L6-v2 (offline wheel): the Normalize stripper's first customer, and a portable qnorm export."""

from __future__ import annotations

import json

import pytest
import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.base.modules import Normalize

from st_magnitude import MagnitudeCollapseWarning, apply_similarity, strip_normalize
from st_magnitude.model.info import model_gammas
from st_magnitude.similarity import get_similarity

pytestmark = pytest.mark.slow

TEXTS = [
    "Vitamin D deficiency is associated with an increased risk of cardiovascular disease.",
    "Coffee consumption and the risk of type 2 diabetes: a meta-analysis.",
    "What is the effect of green tea on blood pressure?",
    "Sleep duration and memory consolidation in older adults.",
]


def test_strip_real_minilm_keeps_direction_and_frees_magnitude(minilm_dir, tmp_path):
    model = SentenceTransformer(str(minilm_dir), device="cpu")
    assert isinstance(model[-1], Normalize) and model_gammas(model) == (1.0, 1.0)
    normed = model.encode(TEXTS, convert_to_tensor=True)
    # folder level, without loading weights
    with pytest.warns(MagnitudeCollapseWarning):
        out = strip_normalize(minilm_dir, tmp_path / "stripped")
    types = [m["type"] for m in json.loads((out / "modules.json").read_text())]
    assert not any(t.endswith("Normalize") for t in types)
    stripped = SentenceTransformer(str(out), device="cpu")
    raw = stripped.encode(TEXTS, convert_to_tensor=True)
    torch.testing.assert_close(torch.nn.functional.normalize(raw, dim=-1), normed, rtol=1e-4, atol=1e-5)
    norms = raw.norm(dim=-1)
    assert (norms > 1.5).all() and norms.std() > 1e-3, norms  # MiniLM's pooled norms are ~3-8, not 1
    assert stripped.similarity_fn_name == "dot"
    # in memory gives the same model
    with pytest.warns(MagnitudeCollapseWarning):
        strip_normalize(model)
    torch.testing.assert_close(model.encode(TEXTS, convert_to_tensor=True), raw, rtol=1e-5, atol=1e-5)


def test_real_minilm_qnorm_export_scores_like_training_similarity(minilm_dir, tmp_path):
    raw_model = SentenceTransformer(str(minilm_dir), device="cpu")
    strip_normalize(raw_model, warn=False)
    raw = raw_model.encode(TEXTS, convert_to_tensor=True)
    model = SentenceTransformer(str(minilm_dir), device="cpu")
    apply_similarity(model, "qnorm", warn_on_strip=False)
    model.save(str(tmp_path / "qnorm"))
    reloaded = SentenceTransformer(str(tmp_path / "qnorm"), device="cpu")
    scores = reloaded.similarity(
        reloaded.encode_query(TEXTS[:2], convert_to_tensor=True),
        reloaded.encode_document(TEXTS, convert_to_tensor=True),
    )
    torch.testing.assert_close(scores, get_similarity("qnorm")(raw[:2], raw), rtol=1e-4, atol=1e-5)
