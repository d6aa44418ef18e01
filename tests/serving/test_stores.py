"""Store-aware export: under cosine / L2 the exported vectors rank exactly like the trained similarity."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import build_tiny_st
from helpers.deploy_kit import TOY_DOCS, TOY_QUERIES
from sentence_transformers import SentenceTransformer

from st_magnitude import NormBoundWarning, apply_similarity, convert_for_store
from st_magnitude.cli import main
from st_magnitude.model.load import load_model
from st_magnitude.model.stores import prepare_for_store, preserved_metrics, set_default_route
from st_magnitude.modules import MIPSAugment
from st_magnitude.serving.agreement import reference_ranking

pytestmark = pytest.mark.filterwarnings("ignore::st_magnitude.MagnitudeCollapseWarning")


@pytest.fixture
def make_model(tiny_bert_dir):
    """A fresh tiny cosine-pretrained model (ends in Normalize), as a user's base model."""
    return lambda: build_tiny_st(tiny_bert_dir, normalize=True)


@pytest.fixture
def toy_docs():
    return TOY_DOCS


@pytest.fixture
def toy_queries():
    return TOY_QUERIES


def numpy_rank(q: np.ndarray, d: np.ndarray, metric: str, k: int = 10) -> list[list[int]]:
    """Exact top-k by cosine / L2 / dot in float64, written out independently of the package."""
    out = []
    for qv in q.astype(np.float64):
        rows = []
        for j, dv in enumerate(d.astype(np.float64)):
            if metric == "cosine":
                s = qv @ dv / (np.linalg.norm(qv) * np.linalg.norm(dv))
            elif metric == "l2":
                s = -np.sum((qv - dv) ** 2)
            else:
                s = qv @ dv
            rows.append((-s, j))
        out.append([j for _, j in sorted(rows)[:k]])
    return out


def roles(model, queries, docs):
    return (
        model.encode_query(queries, convert_to_numpy=True),
        model.encode_document(docs, convert_to_numpy=True),
    )


@pytest.mark.parametrize("variant", ["qnorm", "learnable", "dot", "dnorm"])
@pytest.mark.parametrize("store", ["cosine", "l2"])
def test_export_ranks_like_the_trained_similarity(make_model, toy_queries, toy_docs, variant, store):
    trained = apply_similarity(make_model(), variant)
    ref = reference_ranking(trained, toy_queries, toy_docs)
    exported = convert_for_store(make_model(), variant, store, documents=toy_docs)
    augmented = any(isinstance(m, MIPSAugment) for m in exported)
    assert augmented == (variant != "dnorm")  # γd = 1 needs nothing
    assert numpy_rank(*roles(exported, toy_queries, toy_docs), store) == ref
    assert numpy_rank(*roles(exported, toy_queries, toy_docs), "dot") == ref  # dot still ranks as trained
    assert set(preserved_metrics(exported)) == {"dot", "cosine", "l2"}


def test_without_export_a_cosine_store_loses_the_qnorm_ranking(make_model, toy_queries, toy_docs):
    trained = apply_similarity(make_model(), "qnorm")
    assert preserved_metrics(trained) == ("dot",)
    ref = reference_ranking(trained, toy_queries, toy_docs)
    assert numpy_rank(*roles(trained, toy_queries, toy_docs), "cosine") != ref


def test_scores_change_by_a_per_query_factor(make_model, toy_queries, toy_docs):
    trained = apply_similarity(make_model(), "qnorm")
    exported = convert_for_store(make_model(), "qnorm", "cosine", max_norm=50.0)
    q, d = roles(trained, toy_queries, toy_docs)
    qa, da = roles(exported, toy_queries, toy_docs)
    cos = (qa / np.linalg.norm(qa, axis=1, keepdims=True)) @ (da / np.linalg.norm(da, axis=1, keepdims=True)).T
    factor = (q @ d.T) / cos  # the same for every document of a query: ‖q‖ M (here ‖q‖ = 1 for qnorm)
    assert np.allclose(factor, 50.0, rtol=1e-4)


def test_bound_from_documents_and_the_overflow_warning(make_model, toy_docs):
    model = apply_similarity(make_model(), "qnorm")
    norms = np.linalg.norm(model.encode_document(toy_docs, convert_to_numpy=True), axis=1)
    exported = convert_for_store(make_model(), "qnorm", "cosine", documents=toy_docs, margin=1.1)
    aug = next(m for m in exported if isinstance(m, MIPSAugment))
    assert aug.max_norm == pytest.approx(norms.max() * 1.1, rel=1e-5)
    bound = float(np.median(norms))
    expected = int((norms > bound).sum())
    with pytest.warns(NormBoundWarning, match=f"{expected} of {len(toy_docs)} sample document"):
        convert_for_store(make_model(), "qnorm", "l2", max_norm=bound, documents=toy_docs)


def test_errors_name_what_is_allowed(make_model):
    with pytest.raises(ValueError, match=r"store must be one of \('dot', 'cosine', 'l2'\)"):
        convert_for_store(make_model(), "qnorm", "ip")
    with pytest.raises(ValueError, match="pass max_norm=M or documents="):
        convert_for_store(make_model(), "qnorm", "cosine")
    with pytest.raises(ValueError, match=r"margin must lie in \[1, 10\]"):
        convert_for_store(make_model(), "qnorm", "cosine", documents=["a b"], margin=0.5)
    with pytest.raises(ValueError, match="default route must be one of"):
        convert_for_store(make_model(), "qnorm", default_route="query")


def test_reexport_replaces_the_augmentation(make_model):
    model = convert_for_store(make_model(), "qnorm", "cosine", max_norm=3.0)
    prepare_for_store(model, "l2", max_norm=7.0)
    assert [m.max_norm for m in model if isinstance(m, MIPSAugment)] == [7.0]
    prepare_for_store(model, "dot")
    assert not any(isinstance(m, MIPSAugment) for m in model)
    convert_for_store(model, "dnorm", "cosine")
    assert [type(m).__name__ for m in model] == ["Router"]


def test_saved_export_reloads_with_the_same_vectors(make_model, toy_docs, tmp_path):
    model = convert_for_store(make_model(), "qnorm", "cosine", documents=toy_docs)
    model.save(str(tmp_path / "m"))
    want = model.encode_document(toy_docs, convert_to_numpy=True)
    for back in (load_model(str(tmp_path / "m")), SentenceTransformer(str(tmp_path / "m"), trust_remote_code=True)):
        assert np.array_equal(back.encode_document(toy_docs, convert_to_numpy=True), want)
    with pytest.raises(ValueError, match="trust_remote_code"):
        SentenceTransformer(str(tmp_path / "m"))  # stock ST: the module is package code


def test_default_route_keeps_the_top_k_for_role_unaware_callers(make_model, toy_queries, toy_docs):
    model = apply_similarity(make_model(), "qnorm")
    ref = reference_ranking(model, toy_queries, toy_docs)
    with pytest.raises(ValueError, match="Could not determine route"):
        model.encode(toy_docs[:2])
    set_default_route(model, "document")
    q, d = model.encode(toy_queries, convert_to_numpy=True), model.encode(toy_docs, convert_to_numpy=True)
    assert np.array_equal(d, model.encode_document(toy_docs, convert_to_numpy=True))
    assert numpy_rank(q, d, "dot") == ref  # queries encoded as documents: scaled per query, same top-k
    set_default_route(model, None)
    with pytest.raises(ValueError, match="Could not determine route"):
        model.encode(toy_docs[:2])


def test_cli_store_and_default_route(saved_tiny, tmp_path, toy_queries, toy_docs, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        "".join(json.dumps({"_id": str(i), "title": "", "text": t}) + "\n" for i, t in enumerate(toy_docs))
    )
    out = tmp_path / "qnorm-cosine"
    assert (
        main(["convert", str(saved_tiny), "qnorm", "--store", "cosine", "--norm-texts", str(corpus), "-o", str(out)])
        == 0
    )
    printed = capsys.readouterr().out
    assert "store=cosine; max_norm M=" in printed and "trust_remote_code=True" in printed
    exported = load_model(str(out))
    ref = reference_ranking(apply_similarity(load_model(str(saved_tiny)), "qnorm"), toy_queries, toy_docs)
    assert numpy_rank(*roles(exported, toy_queries, toy_docs), "cosine") == ref

    texts = tmp_path / "docs.txt"
    texts.write_text("\n".join(toy_docs) + "\n")
    out2 = tmp_path / "qnorm-l2"
    assert (
        main(["convert", str(saved_tiny), "qnorm", "--store", "l2", "--norm-texts", str(texts), "-o", str(out2)]) == 0
    )
    assert load_model(str(out2)).encode_document(["a b"]).shape == (1, 33)
    route = ["convert", str(saved_tiny), "qnorm", "--default-route", "document"]
    assert main([*route, "--store", "l2", "--norm-texts", str(texts), "-o", str(tmp_path / "r")]) == 2
    assert "cannot keep the ranking" in capsys.readouterr().err and not (tmp_path / "r").exists()
    assert main([*route, "-o", str(tmp_path / "r")]) == 0  # an inner-product store: exact for role-less callers
    assert "default_route=document" in capsys.readouterr().out

    assert main(["convert", str(saved_tiny), "qnorm", "--store", "l2", "-o", str(tmp_path / "x")]) == 2
    assert "pass max_norm=M or documents=" in capsys.readouterr().err
    assert not (tmp_path / "x").exists() or not any((tmp_path / "x").iterdir())
    assert main(["convert", str(saved_tiny), "qnorm", "--store", "ip", "-o", str(tmp_path / "y")]) == 2
    assert "invalid choice: 'ip'" in capsys.readouterr().err


def test_cli_store_names_match_the_library():
    from st_magnitude.cli import convert as cli_convert
    from st_magnitude.model.stores import DEFAULT_ROUTES, STORES

    assert cli_convert.STORES == STORES and cli_convert.DEFAULT_ROUTES == DEFAULT_ROUTES
