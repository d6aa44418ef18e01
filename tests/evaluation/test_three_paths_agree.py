"""Our evaluation, BEIR's DenseRetrievalExactSearch and mteb give the same nDCG@10 — with the model's roles."""

from __future__ import annotations

import json

import pytest
import torch

from st_magnitude import apply_similarity
from st_magnitude.data.beir import load_beir, subsample
from st_magnitude.evaluation import RoleIREvaluator
from st_magnitude.evaluation.beir import STQueryDocAdapter, beir_evaluate

mteb = pytest.importorskip("mteb")

from st_magnitude.evaluation.mteb import (  # noqa: E402
    MTEBOfflineError,
    evaluate_mteb,
    make_local_task,
    mteb_wrapper,
)

pytestmark = pytest.mark.toy_beir(n_docs=30, n_queries=8)


def _three(model, folder, data, **sub):
    ours = RoleIREvaluator(data.queries, data.corpus, data.qrels)(model)
    beir = beir_evaluate(model, data)
    mt = next(iter(evaluate_mteb(model, [folder], **sub).values()))
    return ours, beir, mt


@pytest.mark.parametrize("similarity", [None, "qnorm", "dnorm"])
def test_ours_beir_mteb_agree(tiny_model_raw, toy, similarity):
    # Given a plain (dot) model or one converted to qnorm/dnorm, When evaluated through the three paths on the
    # same local folder, Then nDCG@10 / Recall@100 / MRR@10 agree to 1e-4
    model = tiny_model_raw if similarity is None else apply_similarity(tiny_model_raw, similarity)
    data = load_beir(toy)
    ours, beir, mt = _three(model, toy, data)
    assert ours["ndcg@10"] == pytest.approx(beir["ndcg@10"], abs=1e-4)
    assert ours["ndcg@10"] == pytest.approx(mt["ndcg_at_10"], abs=1e-4)
    assert ours["recall@100"] == pytest.approx(mt["recall_at_100"], abs=1e-4)
    assert ours["mrr@10"] == pytest.approx(mt["mrr_at_10"], abs=1e-4)


def test_subsampled_local_task_matches_our_subsample(tiny_model, toy):
    data = subsample(load_beir(toy), max_corpus=20, max_queries=5, seed=3)
    ours, beir, mt = _three(tiny_model, toy, data, max_corpus=20, max_queries=5, seed=3)
    assert ours["ndcg@10"] == pytest.approx(mt["ndcg_at_10"], abs=1e-4) == pytest.approx(beir["ndcg@10"], abs=1e-4)
    task = make_local_task(toy, max_corpus=20, max_queries=5, seed=3)()
    task.load_data()
    split = task.dataset["default"]["test"]
    assert len(split["corpus"]) == 20 and len(split["queries"]) == 5 and task.ignore_identical_ids


def test_beir_adapter_keeps_roles(tiny_model_raw):
    model = apply_similarity(tiny_model_raw, "qnorm")
    ad = STQueryDocAdapter(model)
    q = ad.encode_queries(["protein cancer", "heart risk"], convert_to_tensor=True)
    d = ad.encode_corpus([{"title": "a", "text": "protein cell"}], convert_to_tensor=True)
    assert torch.allclose(q.norm(dim=-1), torch.ones(2), atol=1e-5)
    assert not torch.allclose(d.norm(dim=-1), torch.ones(1), atol=1e-3)


def test_no_cache_collision_between_models(tiny_model_raw, tiny_bert_dir, toy, tmp_path):
    # Two different local models, same mteb results folder: each gets its own results (ECOSYSTEM §3.2 pitfall)
    from conftest import build_tiny_st

    other = build_tiny_st(tiny_bert_dir, normalize=False, seed=7)
    torch.manual_seed(7)
    for p in other.parameters():
        p.data += 0.5 * torch.randn_like(p)
    a = evaluate_mteb(tiny_model_raw, [toy], output_folder=tmp_path / "res")
    b = evaluate_mteb(other, [toy], output_folder=tmp_path / "res")
    b_fresh = evaluate_mteb(other, [toy])
    name = next(iter(a))
    assert b[name]["ndcg_at_10"] == b_fresh[name]["ndcg_at_10"]
    assert a[name]["ndcg_at_10"] != b[name]["ndcg_at_10"]
    w1, w2 = mteb_wrapper(tiny_model_raw), mteb_wrapper(other)
    assert w1.mteb_model_meta.revision != w2.mteb_model_meta.revision
    assert w1.mteb_model_meta.similarity_fn_name is None


def test_builtin_task_offline_is_a_clear_error(tiny_model, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(MTEBOfflineError, match="Hugging Face Hub.*local BEIR folder"):
        evaluate_mteb(tiny_model, ["SciFact"])


def test_unknown_task_and_missing_folder(tiny_model, tmp_path):
    with pytest.raises(ValueError, match="not found"):
        evaluate_mteb(tiny_model, ["NoSuchTaskXYZ"])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        evaluate_mteb(tiny_model, [str(tmp_path / "missing" / "scifact")])


def test_mteb_cli_writes_mteb_results(tiny_model, toy, tmp_path, monkeypatch):
    from st_magnitude.cli import main

    path = tmp_path / "model"
    tiny_model.save(str(path))
    monkeypatch.chdir(tmp_path)
    rc = main(["mteb", "run", "-m", str(path), "-t", str(toy), "--output", "res", "--max-queries", "4"])
    assert rc == 0
    files = list((tmp_path / "res" / "results").rglob("LocalToyRetrieval_*.json"))
    assert len(files) == 1
    payload = json.loads(files[0].read_text())
    assert payload["task_name"].startswith("LocalToyRetrieval") and "ndcg_at_10" in payload["scores"]["test"][0]
    data = subsample(load_beir(toy), max_queries=4, seed=42)
    ours = RoleIREvaluator(data.queries, data.corpus, data.qrels)(tiny_model)
    assert payload["scores"]["test"][0]["ndcg_at_10"] == pytest.approx(ours["ndcg@10"], abs=1e-4)


def test_mteb_cli_offline_builtin_task(tiny_model, tmp_path, monkeypatch, capsys):
    from st_magnitude.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = tmp_path / "model"
    tiny_model.save(str(path))
    rc = main(["mteb", "run", "-m", str(path), "-t", "SciFact", "--output", str(tmp_path / "r")])
    assert rc == 2 and "Hugging Face Hub" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("similarity", ["cosine", "qnorm"])
def test_minilm_scifact_subsample_three_paths(minilm_dir, beir_dir, similarity):
    # all-MiniLM-L6-v2 on a seeded SciFact subsample (40 queries, 250 docs, 128 tokens): the three paths agree
    from st_magnitude.model.load import load_model

    torch.set_num_threads(1)
    model = load_model(str(minilm_dir), max_seq_length=128)
    if similarity != "cosine":
        apply_similarity(model, similarity, warn_on_strip=False)
    folder = beir_dir / "scifact"
    data = subsample(load_beir(folder), max_corpus=250, max_queries=40, seed=42)
    ours, beir, mt = _three(model, folder, data, max_corpus=250, max_queries=40, seed=42)
    assert ours["ndcg@10"] == pytest.approx(beir["ndcg@10"], abs=1e-4)
    assert ours["ndcg@10"] == pytest.approx(mt["ndcg_at_10"], abs=1e-4)
    assert ours["ndcg@10"] > 0.5  # a trained model, far above the random-model level


def test_mteb_cli_unknown_task_name(tiny_model, tmp_path, capsys):
    from st_magnitude.cli import main

    path = tmp_path / "model"
    tiny_model.save(str(path))
    rc = main(["mteb", "run", "-m", str(path), "-t", "SciFactt", "--output", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert rc == 2 and "neither an mteb task name nor a local BEIR folder" in err
