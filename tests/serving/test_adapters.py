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
from st_magnitude.serving.agreement import STACKS, reference_ranking, stack_ranking, top_k_agreement
from st_magnitude.serving.metric import best_metric, store_metric

pytestmark = pytest.mark.filterwarnings("ignore::st_magnitude.MagnitudeCollapseWarning")

PACKAGES = {
    "langchain": ("langchain_core", "langchain-core"),
    "llamaindex": ("llama_index.core", "llama-index-core"),
    "haystack": ("haystack", "haystack-ai"),
    "chroma": ("chromadb", "chromadb"),
    "lancedb": ("lancedb", "lancedb"),
    "qdrant": ("qdrant_client", "qdrant-client"),
}
#: the metrics each stack is checked with: its only one, or its ranking-preserving default and the others
METRICS = {
    "langchain": ["cosine"],
    "llamaindex": ["cosine"],
    "haystack": [None, "cosine"],
    "chroma": [None, "cosine", "l2"],
    "lancedb": [None, "cosine", "l2"],
    "qdrant": [None, "cosine", "l2"],
}


def need(stack: str) -> None:
    module, dist = PACKAGES[stack]
    if importlib.util.find_spec(module.split(".")[0]) is None or importlib.util.find_spec(module) is None:
        pytest.skip(f"{dist} is not installed (pip install 'st-magnitude[deploy]')")


@pytest.fixture(scope="module")
def models(tiny_bert_dir):
    """Per variant: the trained model, its --store cosine export, and the exact-search reference top-10."""
    out = {}
    for variant in ("qnorm", "dnorm", "learnable"):
        trained = apply_similarity(build_tiny_st(tiny_bert_dir), variant)
        export = convert_for_store(build_tiny_st(tiny_bert_dir), variant, "cosine", documents=TOY_DOCS)
        out[variant] = (trained, export, reference_ranking(trained, TOY_QUERIES, TOY_DOCS))
    return out


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize("variant", ["qnorm", "dnorm", "learnable"])
def test_stack_returns_the_exact_top10(models, stack, variant):
    need(stack)
    trained, export, ref = models[variant]
    for metric in METRICS[stack]:
        model = trained if metric in (None, "dot") else export
        got = stack_ranking(stack, model, TOY_QUERIES, TOY_DOCS, 10, metric)
        assert got == ref, f"{stack} {metric}: agreement {top_k_agreement(ref, got)}"


@pytest.mark.parametrize("stack", ["langchain", "llamaindex", "haystack", "chroma", "lancedb", "qdrant"])
def test_a_metric_that_loses_the_ranking_is_refused(models, stack):
    need(stack)
    trained = models["qnorm"][0]
    metric = "cosine"
    with pytest.raises(ValueError, match="--store cosine"):
        stack_ranking(stack, trained, TOY_QUERIES[:1], TOY_DOCS[:5], 3, metric)


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
