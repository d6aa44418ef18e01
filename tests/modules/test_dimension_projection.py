"""DimensionProjection: a plain ST Dense (identity), paper order equivalence, insertion, portability."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch
from sentence_transformers.base.modules import Dense, Normalize, Router
from torch import nn

from st_magnitude.modules.dimension_projection import (
    DimensionProjection,
    ProjectionActivationWarning,
    add_dimension_projection,
    check_projection,
    dimension_grid,
    is_dimension_projection,
    truncate_embeddings,
)


def test_is_plain_st_dense_with_identity():
    proj = DimensionProjection(32, 48, seed=0)
    assert type(proj) is Dense
    assert isinstance(proj.activation_function, nn.Identity)
    assert proj.linear.bias is not None and proj.get_embedding_dimension() == 48
    assert is_dimension_projection(proj) and not isinstance(DimensionProjection, type)  # a factory, no metaclass
    assert not is_dimension_projection(Dense(32, 48))  # Tanh default is not the paper's layer
    assert is_dimension_projection(Dense(32, 48, activation_function=None))
    x = torch.randn(5, 32)
    out = proj({"sentence_embedding": x})["sentence_embedding"]
    torch.testing.assert_close(out, x @ proj.linear.weight.T + proj.linear.bias)


@pytest.mark.parametrize("bad", [dict(in_features=0, out_features=4), dict(in_features=4, out_features=2.5)])
def test_rejects_bad_sizes(bad):
    with pytest.raises(ValueError, match="positive int"):
        DimensionProjection(**bad)


def test_rejects_unknown_init():
    with pytest.raises(ValueError, match="linear, orthogonal, identity"):
        DimensionProjection(4, 4, init="xavier")


def test_linear_init_matches_nn_linear_bounds_and_seed():
    a, b = DimensionProjection(64, 16, seed=3), DimensionProjection(64, 16, seed=3)
    torch.testing.assert_close(a.linear.weight, b.linear.weight)
    bound = 1 / np.sqrt(64)
    assert a.linear.weight.abs().max() <= bound and a.linear.bias.abs().max() <= bound
    assert a.linear.weight.std() > 0.5 * bound / np.sqrt(3)  # U(-b, b) has std b/√3


@pytest.mark.parametrize("m", [8, 32, 96])
def test_identity_init_truncates_or_pads(m):
    x = torch.randn(4, 32)
    out = DimensionProjection(32, m, init="identity")({"sentence_embedding": x})["sentence_embedding"]
    k = min(m, 32)
    torch.testing.assert_close(out[:, :k], x[:, :k])
    assert torch.all(out[:, k:] == 0)


def test_orthogonal_init_preserves_norms_when_expanding():
    x = torch.randn(6, 32)
    out = DimensionProjection(32, 128, init="orthogonal", seed=1)({"sentence_embedding": x})["sentence_embedding"]
    torch.testing.assert_close(out.norm(dim=1), x.norm(dim=1), rtol=1e-5, atol=1e-5)


def test_pool_then_project_equals_paper_project_then_pool(tiny_model_raw, sentences):
    """Paper 003 §3.1 projects every token then mean-pools; the module pools then projects."""
    add_dimension_projection(tiny_model_raw, 40, seed=0)
    proj = tiny_model_raw[2]
    features = tiny_model_raw.preprocess(sentences)
    with torch.no_grad():
        out = tiny_model_raw(dict(features))
        tokens, mask = out["token_embeddings"], out["attention_mask"]
        expected = []
        for t, m in zip(tokens, mask):  # brute force: project each real token, then average
            projected = [proj.linear.weight @ t[i] + proj.linear.bias for i in range(len(m)) if m[i] == 1]
            expected.append(torch.stack(projected).mean(0))
    torch.testing.assert_close(out["sentence_embedding"], torch.stack(expected), rtol=1e-5, atol=1e-5)


def test_add_inserts_before_normalize(tiny_model):
    before = tiny_model.encode(["the protein"], convert_to_tensor=True)
    add_dimension_projection(tiny_model, 48, seed=0)
    kinds = [type(m).__name__ for m in tiny_model.children()]
    assert kinds == ["Transformer", "Pooling", "Dense", "Normalize"]
    emb = tiny_model.encode(["the protein", "gene cell"], convert_to_tensor=True)
    assert emb.shape == (2, 48) and before.shape[1] == 32
    torch.testing.assert_close(emb.norm(dim=1), torch.ones(2))
    assert tiny_model.get_embedding_dimension() == 48


def test_add_without_normalize_appends(tiny_model_raw):
    add_dimension_projection(tiny_model_raw, 16, init="identity")
    assert [type(m).__name__ for m in tiny_model_raw.children()] == ["Transformer", "Pooling", "Dense"]


def test_add_rejects_router(tiny_model_raw):
    t, p = list(tiny_model_raw.children())
    from sentence_transformers import SentenceTransformer

    routed = SentenceTransformer(
        modules=[Router.for_query_document(query_modules=[t, p, Normalize()], document_modules=[t, p])]
    )
    with pytest.raises(ValueError, match="before st_magnitude.apply_similarity"):
        add_dimension_projection(routed, 16)


def test_check_projection_warns_on_tanh_dense(tiny_model_raw):
    tiny_model_raw.add_module("2", Dense(32, 16))  # ST default activation: Tanh
    with pytest.warns(ProjectionActivationWarning, match="Tanh"):
        problems = check_projection(tiny_model_raw)
    assert len(problems) == 1
    with pytest.warns(ProjectionActivationWarning):
        add_dimension_projection(tiny_model_raw, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_projection(nn.Sequential(DimensionProjection(4, 4))) == []


def test_saved_model_loads_in_stock_st_without_plugin(stock_st):
    """Reload in a fresh interpreter that cannot import st_magnitude: same embeddings, no trust_remote_code."""
    # Given a model with add_dimension_projection(96), encoded and saved (helpers/stock_st.build_jobs)
    job = stock_st["projected"]
    types = [m["type"] for m in json.loads((job.path / "modules.json").read_text())]
    assert "sentence_transformers.base.modules.dense.Dense" in types
    assert not any("st_magnitude" in t for t in types)
    job.check_loaded()
    assert job.result["plugin_imported"] is False
    assert job.result["activations"] == {"2": "Identity"}
    np.testing.assert_allclose(job.arrays["emb"], job.expected["emb"], rtol=0, atol=1e-6)


def test_truncate_keeps_magnitude():
    x = torch.randn(3, 16) * 5
    t = truncate_embeddings(x, 4)
    torch.testing.assert_close(t, x[:, :4])
    assert not torch.allclose(t.norm(dim=1), torch.ones(3))
    with pytest.raises(ValueError, match=r"\[1, 16\]"):
        truncate_embeddings(x, 17)


def test_dimension_grid_matches_paper_lists():
    assert dimension_grid(384) == [96, 192, 384, 768, 1536, 3072, 6144]
    assert dimension_grid(768, extra_low=(1 / 16, 1 / 8)) == [48, 96, 192, 384, 768, 1536, 3072, 6144, 12288]
    with pytest.raises(ValueError, match="non-integer"):
        dimension_grid(100, multiples=(1 / 3,))
