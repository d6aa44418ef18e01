"""Each serving stack, through its adapter, returns the top-10 of the package's exact search (tiny models).

The stacks are real packages (``pip install 'st-magnitude[deploy]'``); a test skips, naming the package, when its
stack is not installed. qnorm and learnable keep document magnitude: the dot-capable stores get the trained model,
the cosine-only ones (LangChain's and LlamaIndex's in-memory stores) its ``--store cosine`` export.
"""

from __future__ import annotations

import importlib.util

import pytest
from conftest import build_tiny_st
from helpers.deploy_kit import TOY_DOCS, TOY_QUERIES

from st_magnitude import apply_similarity, convert_for_store
from st_magnitude.serving._stacks import STACK_NAMES, stack_spec
from st_magnitude.serving.agreement import reference_ranking, stack_ranking, top_k_agreement
from st_magnitude.serving.metric import best_metric, store_metric

pytestmark = pytest.mark.filterwarnings("ignore::st_magnitude.MagnitudeCollapseWarning")


def metrics_checked(stack: str) -> list[str | None]:
    """The metrics a stack is checked with: its ranking-preserving default (``None``) where it has dot, then every
    other metric it offers (its only one, for a store fixed to cosine)."""
    metrics = stack_spec(stack).metrics
    return [None] * ("dot" in metrics) + [m for m in metrics if m != "dot"]


def need(stack: str) -> None:
    spec = stack_spec(stack)
    if importlib.util.find_spec(spec.imports.split(".")[0]) is None or importlib.util.find_spec(spec.imports) is None:
        pytest.skip(f"{spec.package} is not installed (pip install 'st-magnitude[deploy]')")


@pytest.fixture(scope="module")
def models(tiny_bert_dir):
    """Per variant: the trained model, its --store cosine export, and the exact-search reference top-10."""
    out = {}
    for variant in ("qnorm", "dnorm", "learnable"):
        trained = apply_similarity(build_tiny_st(tiny_bert_dir), variant)
        export = convert_for_store(build_tiny_st(tiny_bert_dir), variant, "cosine", documents=TOY_DOCS)
        out[variant] = (trained, export, reference_ranking(trained, TOY_QUERIES, TOY_DOCS))
    return out


@pytest.mark.parametrize("stack", STACK_NAMES)
@pytest.mark.parametrize("variant", ["qnorm", "dnorm", "learnable"])
def test_stack_returns_the_exact_top10(models, stack, variant):
    need(stack)
    trained, export, ref = models[variant]
    for metric in metrics_checked(stack):
        model = trained if metric in (None, "dot") else export
        got = stack_ranking(stack, model, TOY_QUERIES, TOY_DOCS, 10, metric)
        assert got == ref, f"{stack} {metric}: agreement {top_k_agreement(ref, got)}"


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_a_metric_that_loses_the_ranking_is_refused(models, stack):
    need(stack)
    trained = models["qnorm"][0]
    metric = next(m for m in stack_spec(stack).metrics if m != "dot")
    with pytest.raises(ValueError, match=f"--store {metric}"):
        stack_ranking(stack, trained, TOY_QUERIES[:1], TOY_DOCS[:5], 3, metric)


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_the_stack_own_metric_names_are_understood(models, stack):
    """Each stack's spelling of a metric (``ip``, ``dot_product``, ``EUCLID``, ...) means that metric to the check."""
    dnorm, qnorm = models["dnorm"][0], models["qnorm"][0]
    for metric, own in stack_spec(stack).metrics.items():
        assert store_metric(dnorm, own) == metric and store_metric(dnorm, own.upper()) == metric
        if metric != "dot":
            with pytest.raises(ValueError, match=f"--store {metric}"):
                store_metric(qnorm, own, stack)


def test_metric_choice(models):
    qnorm, qnorm_export = models["qnorm"][:2]
    dnorm = models["dnorm"][0]
    assert best_metric(qnorm) == "dot" and best_metric(qnorm, prefer=("cosine", "dot")) == "dot"
    assert best_metric(qnorm_export, prefer=("cosine", "dot")) == "cosine"
    assert store_metric(dnorm, "EUCLIDEAN") == "l2" and store_metric(qnorm, "ip") == "dot"
    with pytest.raises(ValueError, match="use dot or re-export|Use dot, or re-export"):
        store_metric(qnorm, "l2")
    with pytest.raises(ValueError, match="unknown store metric 'manhattan'"):
        store_metric(dnorm, "manhattan")
    with pytest.raises(ValueError, match="no metric of"):
        best_metric(qnorm, prefer=("cosine",))
    with pytest.raises(ValueError, match="stack must be one of"):
        stack_ranking("faiss", qnorm, ["a"], ["b"])


def test_chroma_collection_sets_and_checks_its_hnsw_recall_settings(models):
    """``max_neighbors`` and ``ef_search`` reach Chroma's HNSW configuration; a value Chroma would reject later (or
    take as a float) is refused at the call, naming the parameter."""
    need("chroma")
    import chromadb
    from chromadb.config import Settings

    from st_magnitude.serving.chroma import chroma_collection

    client = chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False))
    col = chroma_collection(client, "recall-settings", models["qnorm"][0], ef_search=64, max_neighbors=40)
    hnsw = col.configuration["hnsw"]
    assert (hnsw["space"], hnsw["ef_search"], hnsw["ef_construction"], hnsw["max_neighbors"]) == ("ip", 64, 64, 40)
    client.delete_collection(col.name)
    for key, bad in (("max_neighbors", 0), ("ef_search", -1), ("max_neighbors", 16.0), ("ef_search", True)):
        with pytest.raises(ValueError, match=f"{key} must be a positive integer"):
            chroma_collection(client, "refused", models["qnorm"][0], **{key: bad})
