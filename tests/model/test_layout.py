"""One description of a model's module list: read once, written once per conversion."""

from __future__ import annotations

import pytest
from sentence_transformers.base.modules import Dense, Normalize, Router
from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

from st_magnitude.model import _layout, stores
from st_magnitude.model._layout import read_folder_layout, read_layout
from st_magnitude.model.convert import apply_similarity
from st_magnitude.modules import MIPSAugment, RoleNormalize

pytestmark = pytest.mark.filterwarnings("ignore::st_magnitude.MagnitudeCollapseWarning")


def test_the_kinds_name_each_module_as_its_class_is(tiny_model):
    layout = read_layout(tiny_model)
    expected = {Transformer: "transformer", Pooling: "pooling", Normalize: "normalize", Dense: "projection"}
    assert layout.kinds == tuple(expected[type(m)] for m in tiny_model)
    assert layout.modules == tuple(tiny_model)
    assert layout.gammas == (1.0, 1.0) and not layout.carries


def test_a_folder_reads_into_the_same_kinds(saved_tiny, tiny_model):
    _, layout = read_folder_layout(saved_tiny)
    assert layout.kinds == read_layout(tiny_model).kinds
    assert [e.obj["type"].rsplit(".", 1)[-1] for e in layout.modules] == [type(m).__name__ for m in tiny_model]


@pytest.mark.parametrize("similarity", ["qnorm", "learnable"])
def test_the_layout_dimension_is_the_one_sentence_transformers_reports(tiny_model, similarity):
    stores.convert_for_store(tiny_model, similarity, "cosine", max_norm=5.0)
    assert read_layout(tiny_model).dimension == tiny_model.get_embedding_dimension()
    assert isinstance(tiny_model[-1], MIPSAugment)


@pytest.mark.parametrize(
    ("similarity", "store", "documents", "writes"),
    [("qnorm", "dot", None, 1), ("dot", "l2", None, 1), ("dnorm", "cosine", ["a b"], 1), ("dot", "cosine", ["a"], 2)],
)
def test_a_conversion_reads_the_module_list_once_and_writes_it_once(
    tiny_model, monkeypatch, similarity, store, documents, writes
):
    """Measuring documents encodes them through the converted list, so that path writes it before appending."""
    reads, written = [], []
    real_read, real_replace = _layout.read_layout, _layout.replace_modules
    monkeypatch.setattr(stores, "read_layout", lambda m: reads.append(m) or real_read(m))
    monkeypatch.setattr(_layout, "replace_modules", lambda m, new: written.append(new) or real_replace(m, new))
    stores.convert_for_store(tiny_model, similarity, store, max_norm=None if documents else 5.0, documents=documents)
    assert len(reads) == 1
    assert len(written) == writes
    assert written[-1] == list(tiny_model)


def test_an_augmented_learnable_model_converts_to_its_trained_gammas(tiny_model):
    stores.convert_for_store(tiny_model, "learnable", "l2", max_norm=5.0)
    role = next(m for m in tiny_model if isinstance(m, RoleNormalize))
    role.gamma_query_logit.data.fill_(2.0)  # as if trained
    gammas = (role.gamma_query, role.gamma_document)
    stores.convert_for_store(tiny_model, "learnable", "dot")
    layout = read_layout(tiny_model)
    assert "mips_augment" not in layout.kinds and layout.gammas == gammas


def test_a_two_tower_router_keeps_its_routes_and_gets_normalize_where_the_variant_needs_it(tiny_model_raw):
    q_tower, d_tower = list(tiny_model_raw), [Dense(8, 8)]
    router = Router.for_query_document(query_modules=q_tower, document_modules=[*q_tower, *d_tower])
    tiny_model_raw._modules.clear()
    tiny_model_raw.add_module("0", router)
    layout = read_layout(tiny_model_raw)
    assert layout.router is router and layout.gammas is None and layout.asymmetric
    apply_similarity(tiny_model_raw, "dnorm")
    routes = read_layout(tiny_model_raw).routes
    assert not isinstance(routes["query"][-1], Normalize) and isinstance(routes["document"][-1], Normalize)
