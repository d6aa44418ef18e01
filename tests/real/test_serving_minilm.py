"""Real model, real data: every serving stack returns the package's exact top-10 for qnorm, dnorm and learnable
all-MiniLM-L6-v2 on 100 SciFact queries × 1,000 documents; ``convert --store cosine / l2`` keeps the trained
ranking under cosine / L2; the ONNX graphs reproduce the vectors (docs/deployment.md, benchmarks/bench_deploy.py)."""

from __future__ import annotations

import importlib.util
import warnings

import numpy as np
import pytest

from st_magnitude import apply_similarity, convert_for_store
from st_magnitude.data.beir import load_beir, subsample
from st_magnitude.data.text import doc_text
from st_magnitude.model.load import load_model
from st_magnitude.serving._stacks import STACK_NAMES, stack_spec
from st_magnitude.serving.agreement import memoise_encodings, reference_ranking, stack_ranking, top_k_agreement

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::st_magnitude.MagnitudeCollapseWarning"),
    pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning"),
]
MAX_SEQ = 128


@pytest.fixture(scope="module")
def scifact(beir_dir):
    full = load_beir(beir_dir / "scifact")
    # as st-magnitude evaluate --max-queries 100 --max-corpus 1000
    data = subsample(full, max_corpus=1000, max_queries=100, seed=42)
    queries = [data.queries[q] for q in sorted(data.queries)]
    docs = [doc_text(data.corpus[d]) for d in sorted(data.corpus)]
    return queries, docs


def _load(minilm_dir):
    model = load_model(str(minilm_dir), device="cpu")
    model.max_seq_length = MAX_SEQ
    return model


@pytest.fixture(scope="module")
def variants(minilm_dir, scifact):
    queries, docs = scifact
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for variant in ("qnorm", "dnorm", "learnable"):
            trained = memoise_encodings(apply_similarity(_load(minilm_dir), variant))
            export = trained
            if variant != "dnorm":
                # M from the indexed corpus: every document within the bound, so the top-10 is exact
                export = memoise_encodings(convert_for_store(_load(minilm_dir), variant, "cosine", documents=docs))
            out[variant] = (trained, export, reference_ranking(trained, queries, docs))
    return out


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_every_stack_returns_the_exact_top10(variants, scifact, stack):
    spec = stack_spec(stack)
    if importlib.util.find_spec(spec.imports.split(".")[0]) is None:
        pytest.skip(f"{spec.package} is not installed (pip install 'st-magnitude[deploy]')")
    queries, docs = scifact
    for variant, (trained, export, ref) in variants.items():
        model = trained if "dot" in spec.metrics else export  # a store fixed to cosine gets the --store cosine export
        got = stack_ranking(stack, model, queries, docs, 10)
        assert top_k_agreement(ref, got) == (1.0, 1.0), f"{stack} {variant}"


@pytest.mark.parametrize("store", ["cosine", "l2"])
def test_store_export_ranks_like_trained_dot(variants, scifact, store):
    queries, docs = scifact
    trained, export, ref = variants["qnorm"]
    q = export.encode_query(queries, convert_to_numpy=True).astype(np.float64)
    d = export.encode_document(docs, convert_to_numpy=True).astype(np.float64)
    if store == "cosine":
        s = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (d / np.linalg.norm(d, axis=1, keepdims=True)).T
    else:
        s = -((q**2).sum(1)[:, None] + (d**2).sum(1)[None, :] - 2 * q @ d.T)
    got = [list(np.lexsort((np.arange(len(row)), -row))[:10]) for row in s]
    assert top_k_agreement(ref, got) == (1.0, 1.0)


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="onnxruntime is not installed")
def test_onnx_reproduces_the_vectors(variants, scifact, tmp_path):
    from st_magnitude.serving.onnx import OnnxEncoder, export_onnx

    queries, docs = scifact
    trained, _, ref = variants["qnorm"]
    enc = OnnxEncoder(export_onnx(trained, tmp_path / "onnx"))
    q, d = enc.encode_query(queries), enc.encode_document(docs)
    assert np.abs(q - trained.encode_query(queries, convert_to_numpy=True)).max() <= 1e-5
    assert np.abs(d - trained.encode_document(docs, convert_to_numpy=True)).max() <= 1e-5
    s = q.astype(np.float64) @ d.astype(np.float64).T
    got = [list(np.lexsort((np.arange(len(row)), -row))[:10]) for row in s]
    assert top_k_agreement(ref, got) == (1.0, 1.0)
