"""MIPSAugment: the appended coordinate against a per-vector loop, the norm bound, roles and save/load."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from st_magnitude import NormBoundWarning
from st_magnitude.modules import MIPSAugment


def test_coordinates_match_a_loop():
    torch.manual_seed(0)
    emb = torch.randn(7, 5) * torch.rand(7, 1) * 3
    m = 1.5 * float(emb.norm(dim=1).max())  # every row within the bound
    aug = MIPSAugment(m, 5)
    doc = aug.augment(emb, "document")
    qry = aug.augment(emb, "query")
    for i in range(7):
        norm_sq = sum(float(x) ** 2 for x in emb[i])
        assert torch.equal(doc[i, :5], emb[i]) and torch.equal(qry[i, :5], emb[i])
        assert doc[i, 5].item() == pytest.approx(math.sqrt(m * m - norm_sq), rel=1e-6)
        assert qry[i, 5].item() == 0.0
        # every augmented document has norm M, and the inner product with a query is unchanged
        assert float(doc[i].norm()) == pytest.approx(m, rel=1e-6)
    assert torch.allclose(qry @ doc.T, emb @ emb.T, atol=1e-5)


def test_documents_above_the_bound_are_counted_and_warned():
    aug = MIPSAugment(1.0, 2)
    emb = torch.tensor([[0.6, 0.0], [3.0, 4.0], [0.0, 2.0]])
    with pytest.warns(NormBoundWarning, match="2 of 3 document"):
        out = aug.augment(emb, "document")
    assert aug.n_over_bound == 2
    assert out[1, 2].item() == 0.0 and out[2, 2].item() == 0.0  # clamped, never NaN
    assert out[0, 2].item() == pytest.approx(0.8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        aug.augment(emb, "query")  # queries are never bounded


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_norm": 0.0, "dimension": 3}, "max_norm"),
        ({"max_norm": float("nan"), "dimension": 3}, "max_norm"),
        ({"max_norm": 1.0, "dimension": 0}, "dimension"),
        ({"max_norm": 1.0, "dimension": 3, "default_role": "passage"}, "default_role"),
    ],
)
def test_bad_arguments_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MIPSAugment(**kwargs)


def test_roles_and_forward():
    aug = MIPSAugment(2.0, 2)
    feats = {"sentence_embedding": torch.tensor([[1.0, 0.0]])}
    assert aug(dict(feats), task="passage")["sentence_embedding"][0, 2].item() == pytest.approx(math.sqrt(3))
    assert aug(dict(feats), task="query")["sentence_embedding"][0, 2].item() == 0.0
    with pytest.raises(ValueError, match="without a query/document role"):
        aug(dict(feats))  # a role-less input would rank wrongly under cosine / L2: refused by default
    routed = MIPSAugment(2.0, 2, default_role="document")
    assert routed(dict(feats))["sentence_embedding"][0, 2].item() == pytest.approx(math.sqrt(3))
    with pytest.raises(ValueError, match="valid roles"):
        aug(dict(feats), task="title")
    with pytest.raises(ValueError, match="expects 2-d"):
        aug.augment(torch.zeros(1, 3), "query")


def test_save_and_load(tmp_path):
    aug = MIPSAugment(3.5, 4)
    aug.save(str(tmp_path))
    back = MIPSAugment.load(str(tmp_path))
    assert (back.max_norm, back.dimension, back.default_role) == (3.5, 4, None)
    assert back.get_embedding_dimension() == 5
    assert not list(tmp_path.glob("*.safetensors"))  # no parameters, config only
