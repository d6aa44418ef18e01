"""`compare` evaluates through st_magnitude.evaluation.runner (one code path), with the numbers it had before."""

from __future__ import annotations

import warnings

import pytest
import torch
from helpers.toy_beir import write_toy_beir

from st_magnitude import apply_similarity
from st_magnitude.evaluation.runner import PER_QUERY_KEY, evaluate_model
from st_magnitude.lab.compare.config import CompareConfig
from st_magnitude.lab.compare.eval_sets import load_eval_sets
from st_magnitude.lab.engine.evaluation import evaluate_sets
from st_magnitude.lab.engine.models import load_base_model

CORE = ("ndcg@10", "recall@100", "mrr@10", "pooled_auc", "per_query_auc")


@pytest.fixture(scope="module")
def eval_sets(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare_eval")
    folders = {
        "toy": write_toy_beir(root / "toy", n_docs=30, n_queries=8),
        "other": write_toy_beir(root / "other", n_docs=20, n_queries=5, seed=3),
    }
    return load_eval_sets(folders, CompareConfig(max_corpus=None, max_queries=None))


def converted(tiny_model, variant):
    import copy

    model = copy.deepcopy(tiny_model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        apply_similarity(model, variant)
    return model


def old_compare_evaluation(model, es, batch_size=64):
    """compare's evaluation before it moved to integrations.evaluate (verbatim, on the same sorted ids)."""
    from st_magnitude.data.beir import doc_text
    from st_magnitude.evaluation.auc import per_query_auc, pooled_auc_pools, pooled_auc_score
    from st_magnitude.evaluation.ir import encode_roles, exact_search, per_query_metrics, retrieval_metrics
    from st_magnitude.model.info import model_similarity
    from st_magnitude.model.load import raw_model
    from st_magnitude.similarity import get_similarity

    data = es.data
    qids, dids = sorted(data.queries), sorted(data.corpus)
    qt, dt = [data.queries[q] for q in qids], [doc_text(data.corpus[d]) for d in dids]
    sim = model_similarity(model)
    rq, rd = encode_roles(raw_model(model), qt, dt, batch_size=batch_size)
    with torch.no_grad():
        q, d = sim.transform_query(rq), sim.transform_document(rd)
    results = exact_search(q, d, qids, dids, top_k=100)
    m = retrieval_metrics(data.qrels, results, ndcg_at_k=(10,), recall_at_k=(100,), mrr_at_k=(10,))
    per_query = per_query_metrics(data.qrels, results)
    m[PER_QUERY_KEY] = {k: per_query[k]["ndcg@10"] for k in sorted(per_query)}
    pools = pooled_auc_pools(q, d, qids, dids, data.qrels, n_negatives=500)
    m["pooled_auc"] = pooled_auc_score(pools.positives, pools.negatives)
    m["per_query_auc"] = per_query_auc(pools)
    for label in ("cosine", "dot"):
        r = exact_search(rq, rd, qids, dids, top_k=10, score_fn=get_similarity(label))
        m[f"ndcg@10_{label}_raw"] = retrieval_metrics(data.qrels, r, recall_at_k=(), mrr_at_k=())["ndcg@10"]
    dn = rd.norm(dim=-1).tolist()
    relevant = {doc for rel in data.qrels.values() for doc, g in rel.items() if g > 0}
    norms = {
        "relevant": [n for i, n in zip(dids, dn) if i in relevant],
        "other": [n for i, n in zip(dids, dn) if i not in relevant],
        "query": rq.norm(dim=-1).tolist(),
    }
    return m, norms


@pytest.mark.parametrize("variant", ["qnorm", "dnorm", "cosine", "learnable"])
def test_compare_numbers_are_those_of_its_former_evaluation(tiny_model, eval_sets, variant):
    model = converted(tiny_model, variant)
    metrics, norms = evaluate_sets(model, eval_sets)
    for es in eval_sets:
        old_metrics, old_norms = old_compare_evaluation(model, es)
        assert metrics[es.name] == old_metrics  # identical, not close: same embeddings, order and scoring
        assert norms[es.name] == old_norms


@pytest.mark.parametrize("variant", ["qnorm", "learnable"])
def test_compare_evaluation_is_integrations_evaluate(tiny_model, eval_sets, variant):
    model = converted(tiny_model, variant)
    metrics, norms = evaluate_sets(model, eval_sets)
    for es in eval_sets:
        row = evaluate_model(model, es.data, batch_size=64, per_query=True, raw_views=("cosine", "dot"), norms=True)
        assert {k: row[k] for k in metrics[es.name]} == metrics[es.name] and row["norms"] == norms[es.name]
        # the plain path (the model's own encode_query / encode_document and model.similarity) agrees
        plain = evaluate_model(model, es.data, batch_size=64)
        assert {k: plain[k] for k in CORE} == pytest.approx({k: row[k] for k in CORE}, abs=1e-6)
        # the dual view is the rescoring of the raw embeddings (paper 000 §4.2) with cosine and dot
        for label in ("cosine", "dot"):
            rescored = evaluate_model(model, es.data, batch_size=64, similarity=label, pooled_auc=False)
            assert row[f"ndcg@10_{label}_raw"] == pytest.approx(rescored["ndcg@10"], abs=1e-6)
        # per-query nDCG@10 averages to the table's nDCG@10; the norms cover the corpus once
        per_query = row[PER_QUERY_KEY]
        assert sorted(per_query) == sorted(es.data.qrels)
        assert sum(per_query.values()) / len(per_query) == pytest.approx(row["ndcg@10"], abs=1e-5)  # BEIR rounds
        assert len(row["norms"]["relevant"]) + len(row["norms"]["other"]) == len(es.data.corpus)


def test_eval_sets_are_ordered_by_id_whatever_the_file_order(eval_sets):
    for es in eval_sets:
        assert es.query_ids == sorted(es.data.queries) and es.doc_ids == sorted(es.data.corpus)
        assert list(es.data.qrels) == sorted(es.data.qrels)
        assert es.doc_ids != [f"d{i}" for i in range(len(es.doc_ids))]  # the files list d0, d1, ..., d10: not sorted


def test_raw_views_need_a_model_carrying_a_family_similarity(tiny_model, eval_sets):
    import copy

    from sentence_transformers.base.modules import Dense

    model = copy.deepcopy(tiny_model)
    model.add_module("3", Dense(32, 16))  # Normalize followed by a Dense: not a member of the family
    with pytest.raises(ValueError, match="need a model carrying a similarity of the family"):
        evaluate_model(model, eval_sets[0].data, raw_views=("cosine",))
    with pytest.raises(ValueError, match="Valid names|unknown"):
        evaluate_model(converted(tiny_model, "qnorm"), eval_sets[0].data, raw_views=("cosin",))


def test_compare_loads_the_base_model_through_load_model(tiny_model, tmp_path, monkeypatch):
    """One loading path: compare's base model comes from integrations.models (remote-code refusal, offline wheel)."""
    from st_magnitude.model import load as models
    from st_magnitude.model import offline

    tiny_model.save(str(tmp_path / "wheel"))
    monkeypatch.setattr(models, "offline_model_path", lambda: tmp_path / "wheel")
    monkeypatch.setattr(offline, "_in_hub_cache", lambda repo: True)  # cached, but the cache cannot be read
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    real = models._load_path

    def cached_but_broken(path, device, trust):
        if path == offline.OFFLINE_WHEEL_MODEL:
            raise FileNotFoundError("the hub cache is incomplete")
        return real(path, device, trust)

    monkeypatch.setattr(models, "_load_path", cached_but_broken)
    model, desc, source = load_base_model(offline.OFFLINE_WHEEL_MODEL, "cpu", 16)
    assert source == str(tmp_path / "wheel") and "offline wheel" in desc and model.max_seq_length == 16
    assert models.load_model(offline.OFFLINE_WHEEL_MODEL).get_embedding_dimension() == model.get_embedding_dimension()
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_base_model(str(tmp_path / "nope"), "cpu", 16)
    bad = tmp_path / "remote"
    tiny_model.save(str(bad))
    (bad / "modules.json").write_text('[{"idx": 0, "name": "0", "path": "", "type": "evil.Module"}]')
    with pytest.raises(models.RemoteCodeError):
        load_base_model(str(bad), "cpu", 16)
