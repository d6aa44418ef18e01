"""Symmetry guard: asymmetric similarities used where inputs have no roles (paper 000 Prop. 2.1)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator

from st_magnitude import (
    AsymmetricSimilarityWarning,
    apply_similarity,
    check_symmetric_use,
    get_similarity,
    install_symmetry_guard,
    uninstall_symmetry_guard,
)
from st_magnitude.model.stores import set_default_route
from st_magnitude.similarity import LearnableSimilarity

S1 = ["the protein in cancer cell", "coffee and sleep", "diet and heart risk", "fish brain"]
S2 = ["protein increase in cancer", "tea and sleep study", "vitamin diet heart", "fat acid memory"]
SCORES = [0.9, 0.7, 0.8, 0.3]


@pytest.fixture(autouse=True)
def _fresh_guard():
    uninstall_symmetry_guard()
    yield
    uninstall_symmetry_guard()


def _st_methods():
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer import evaluation as ev

    names = ("EmbeddingSimilarityEvaluator", "BinaryClassificationEvaluator", "ParaphraseMiningEvaluator")
    return {"encode": SentenceTransformer.encode, **{n: getattr(ev, n).__call__ for n in names}}


@pytest.mark.parametrize("name", ["qnorm", "dnorm", "learnable"])
def test_apply_similarity_patches_nothing(tiny_model, name):
    """apply_similarity used to install the guard (a process-wide monkeypatch) as a side effect."""
    from st_magnitude.model.guard import symmetry_guard_installed

    before = _st_methods()
    apply_similarity(tiny_model, name, warn_on_strip=False)
    assert _st_methods() == before
    assert not getattr(_st_methods()["encode"], "_st_magnitude_guard", False)
    assert not symmetry_guard_installed()


@pytest.mark.parametrize("name", ["qnorm", "dnorm"])
def test_router_model_refuses_roleless_encode_without_patching(tiny_model, name):
    """Stock ST's Router without a default route raises on encode() without a task (paper 000 Prop. 2.1)."""
    apply_similarity(tiny_model, name, warn_on_strip=False)
    with pytest.raises(ValueError, match="Could not determine route"):
        tiny_model.encode(S1)
    tiny_model.encode_query(S1)  # roles given: fine
    tiny_model.encode_document(S2)


def test_role_normalize_refuses_a_roleless_encode_without_patching(tiny_model):
    """A RoleNormalize model (learnable / fractional γ) refuses a role-less encode from its own forward, as the
    Router does (a warning let the vector stacks' own integrations rank silently wrong), unless a route is set."""
    apply_similarity(tiny_model, "learnable", warn_on_strip=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", AsymmetricSimilarityWarning)
        tiny_model.encode(S1)  # γq = γd at init: symmetric, no error
    apply_similarity(tiny_model, LearnableSimilarity(init_gamma=(0.2, 0.9)), warn_on_strip=False)
    with pytest.raises(ValueError, match=r"RoleNormalize: encode\(\) without a query/document role.*encode_query"):
        tiny_model.encode(S1)
    tiny_model.encode_query(S1)  # roles given: fine
    tiny_model.encode_document(S2)
    set_default_route(tiny_model, "document")  # what --default-route document does
    assert np.allclose(tiny_model.encode(S1), tiny_model.encode_document(S1))


def test_sts_evaluator_on_asymmetric_model_warns(tiny_model):
    apply_similarity(tiny_model, "qnorm", warn_on_strip=False, portable=False)  # the Router would raise first
    set_default_route(tiny_model, "document")  # RoleNormalize too, without a route: the guard is what speaks here
    install_symmetry_guard()  # opt-in
    evaluator = EmbeddingSimilarityEvaluator(S1, S2, SCORES, name="sts")
    with pytest.warns(AsymmetricSimilarityWarning, match="EmbeddingSimilarityEvaluator is a symmetric evaluation"):
        evaluator(tiny_model)


def test_strict_mode_raises_and_symmetric_models_pass(tiny_model, tiny_model_raw):
    install_symmetry_guard(strict=True)
    evaluator = EmbeddingSimilarityEvaluator(S1, S2, SCORES, name="sts")
    with warnings.catch_warnings():
        warnings.simplefilter("error", AsymmetricSimilarityWarning)
        evaluator(tiny_model)  # cosine model: fine
        apply_similarity(tiny_model_raw, "dot")
        evaluator(tiny_model_raw)  # dot model: fine
    apply_similarity(tiny_model, "dnorm", warn_on_strip=False)
    with pytest.raises(ValueError, match="Prop. 2.1|symmetric evaluation"):
        evaluator(tiny_model)


def test_guard_encode_without_role_warns_once(tiny_model):
    apply_similarity(tiny_model, "dnorm", warn_on_strip=False, portable=False)  # RoleNormalize: document default
    set_default_route(tiny_model, "document")  # a role-less encode allowed: the guard is what speaks here
    install_symmetry_guard()
    with pytest.warns(AsymmetricSimilarityWarning, match="encode\\(\\) was called without a query/document role"):
        tiny_model.encode(S1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", AsymmetricSimilarityWarning)
        tiny_model.encode(S1)  # once per model
        tiny_model.encode_query(S1)  # roles given: never warns
        tiny_model.encode_document(S2)


def test_check_symmetric_use_on_similarities():
    assert check_symmetric_use(get_similarity("cosine"))
    assert check_symmetric_use(get_similarity("learnable"))  # γq = γd at init
    with pytest.warns(AsymmetricSimilarityWarning, match="clustering"):
        assert not check_symmetric_use(get_similarity("qnorm"), context="clustering")
    with pytest.raises(ValueError, match="Prop. 2.1"):
        check_symmetric_use(LearnableSimilarity(init_gamma=(0.2, 0.9)), strict=True)


def test_uninstall_restores_stock_behaviour(tiny_model):
    from sentence_transformers import SentenceTransformer

    original = SentenceTransformer.encode
    install_symmetry_guard()
    assert SentenceTransformer.encode is not original
    uninstall_symmetry_guard()
    assert SentenceTransformer.encode is original
