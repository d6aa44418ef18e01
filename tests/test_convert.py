"""apply_similarity / strip_normalize: the model carries its similarity, and saved models stay portable."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.base.modules import Normalize, Router

from st_magnitude import MagnitudeCollapseWarning, apply_similarity, is_asymmetric, strip_normalize
from st_magnitude.model.info import carried_similarity, model_gammas
from st_magnitude.modules import RoleNormalize
from st_magnitude.similarity import CORNER_GAMMAS, PowerNormSimilarity, get_similarity

QUERIES = ["protein in cancer cell", "coffee and sleep", "diet and heart risk"]
DOCS = ["the protein increase in cancer cell", "vitamin and diet effect on heart risk", "tea and sleep study", "fish"]


def raw_embeddings(model_raw: SentenceTransformer, texts: list[str]) -> torch.Tensor:
    return model_raw.encode(texts, convert_to_tensor=True)


@pytest.mark.parametrize("name", ["cosine", "dot", "qnorm", "dnorm", "learnable"])
def test_model_similarity_equals_training_similarity(tiny_bert_dir, name):
    from conftest import build_tiny_st

    # Given the same backbone without Normalize (the raw embeddings) and a converted copy
    raw = build_tiny_st(tiny_bert_dir, normalize=False)
    model = build_tiny_st(tiny_bert_dir, normalize=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MagnitudeCollapseWarning)
        apply_similarity(model, name)
    # When encoding with roles and scoring with the model's own similarity
    scores = model.similarity(
        model.encode_query(QUERIES, convert_to_tensor=True), model.encode_document(DOCS, convert_to_tensor=True)
    )
    # Then it equals the family member applied to raw embeddings
    expected = get_similarity(name)(raw_embeddings(raw, QUERIES), raw_embeddings(raw, DOCS))
    torch.testing.assert_close(scores, expected, rtol=1e-5, atol=1e-5)
    assert model.similarity_fn_name == "dot"
    if name == "learnable":
        assert model_gammas(model) == pytest.approx((0.5, 0.5))
    else:
        assert model_gammas(model) == CORNER_GAMMAS[name]
    assert is_asymmetric(model) == (name in ("qnorm", "dnorm"))


def test_corner_variants_use_only_builtin_modules(tiny_model):
    apply_similarity(tiny_model, "qnorm", warn_on_strip=False)
    router = tiny_model[0]
    assert isinstance(router, Router) and len(tiny_model) == 1
    q_route, d_route = list(router.sub_modules["query"]), list(router.sub_modules["document"])
    assert isinstance(q_route[-1], Normalize) and not any(isinstance(m, Normalize) for m in d_route)
    # the backbone is shared, not copied
    assert [id(m) for m in q_route[:-1]] == [id(m) for m in d_route]
    n_params = sum(p.numel() for p in tiny_model.parameters())
    assert n_params == sum(p.numel() for p in q_route[0].parameters())


def test_reapplying_replaces_the_variant(tiny_model):
    apply_similarity(tiny_model, "qnorm", warn_on_strip=False)
    apply_similarity(tiny_model, "dnorm", warn_on_strip=False)
    assert model_gammas(tiny_model) == (0.0, 1.0)
    apply_similarity(tiny_model, "learnable", warn_on_strip=False)
    assert not isinstance(tiny_model[0], Router)
    assert sum(isinstance(m, RoleNormalize) for m in tiny_model) == 1
    apply_similarity(tiny_model, "cosine")
    assert model_gammas(tiny_model) == (1.0, 1.0) and carried_similarity(tiny_model) is None


def test_stripping_warns_about_magnitude_collapse(tiny_model):
    with pytest.warns(MagnitudeCollapseWarning, match="App. F/N.3"):
        apply_similarity(tiny_model, "dnorm")


def test_apply_similarity_rejects_bad_input(tiny_model):
    with pytest.raises(ValueError, match="Valid names"):
        apply_similarity(tiny_model, "cosin")
    with pytest.raises(TypeError, match="SentenceTransformer"):
        apply_similarity(object(), "dot")  # type: ignore[arg-type]


def test_two_tower_router_gets_normalize_on_the_right_route(tiny_bert_dir):
    from conftest import build_tiny_st

    q_tower = build_tiny_st(tiny_bert_dir, normalize=True, seed=1)
    d_tower = build_tiny_st(tiny_bert_dir, normalize=False, seed=2)
    router = Router.for_query_document(query_modules=list(q_tower), document_modules=list(d_tower))
    model = SentenceTransformer(modules=[router], device="cpu")
    assert is_asymmetric(model)  # an unrecognised two-tower model needs roles
    apply_similarity(model, "dnorm", warn_on_strip=False)
    q = model.encode_query(QUERIES, convert_to_tensor=True)
    d = model.encode_document(DOCS, convert_to_tensor=True)
    assert not torch.allclose(q.norm(dim=-1), torch.ones(3))
    torch.testing.assert_close(d.norm(dim=-1), torch.ones(4))


@pytest.mark.parametrize("name", ["cosine", "dot", "qnorm", "dnorm"])
def test_saved_corner_model_loads_in_stock_st_without_the_plugin(stock_st, name):
    # Given a corner model converted, encoded and saved (helpers/stock_st.build_jobs)
    job = stock_st[name]
    modules = json.loads((job.path / "modules.json").read_text())
    assert all(m["type"].startswith("sentence_transformers.") for m in modules)
    # When a process that cannot import st_magnitude loads it (one process for all stock-ST checks)
    job.check_loaded()
    assert job.result["plugin_imported"] is False
    # Then embeddings and scores are identical
    got = job.arrays
    np.testing.assert_allclose(got["q"], job.expected["q"], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got["d"], job.expected["d"], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got["s"], job.expected["s"], rtol=1e-6, atol=1e-6)
    assert job.result["similarity_fn_name"] == "dot"


def test_learnable_model_round_trips_with_trust_remote_code_and_keeps_gamma(stock_st):
    # Given a learnable model with γ̂ = (1.3, -0.7), encoded and saved (helpers/stock_st.build_jobs)
    job = stock_st["learnable"]
    # Without trust_remote_code stock ST refuses, and says which flag is needed
    with pytest.raises(ValueError, match="trust_remote_code=True"):
        SentenceTransformer(str(job.path), device="cpu")
    job.check_loaded()
    assert job.result["plugin_imported"] is True  # loaded with trust_remote_code, the block lifted
    np.testing.assert_allclose(job.arrays["q"], job.expected["q"], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(job.arrays["d"], job.expected["d"], rtol=1e-6, atol=1e-6)
    reloaded = SentenceTransformer(str(job.path), device="cpu", trust_remote_code=True)
    assert isinstance(reloaded[-1], RoleNormalize)
    assert reloaded[-1].gamma_query == pytest.approx(torch.sigmoid(torch.tensor(1.3)).item())
    assert reloaded[-1].gamma_document == pytest.approx(torch.sigmoid(torch.tensor(-0.7)).item())


def test_strip_normalize_in_memory(tiny_model):
    normed = tiny_model.encode(DOCS, convert_to_tensor=True)
    with pytest.warns(MagnitudeCollapseWarning):
        strip_normalize(tiny_model)
    raw = tiny_model.encode(DOCS, convert_to_tensor=True)
    assert not any(isinstance(m, Normalize) for m in tiny_model.modules())
    assert tiny_model.similarity_fn_name == "dot"
    torch.testing.assert_close(torch.nn.functional.normalize(raw, dim=-1), normed, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(raw.norm(dim=-1), torch.ones(len(DOCS)))


def test_strip_normalize_inside_router_and_on_a_folder(tiny_model, tmp_path):
    apply_similarity(tiny_model, "qnorm", warn_on_strip=False)
    tiny_model.save(str(tmp_path / "qnorm"))
    # folder level: no weights loaded, written to a new folder
    with pytest.warns(MagnitudeCollapseWarning):
        out = strip_normalize(tmp_path / "qnorm", tmp_path / "stripped")
    cfg = json.loads((out / "config_sentence_transformers.json").read_text())
    assert cfg["similarity_fn_name"] == "dot"
    stripped = SentenceTransformer(str(out), device="cpu")
    assert not any(isinstance(m, Normalize) for m in stripped.modules())
    q = stripped.encode_query(QUERIES, convert_to_tensor=True)
    assert not torch.allclose(q.norm(dim=-1), torch.ones(3))
    # in memory on the Router model
    with pytest.warns(MagnitudeCollapseWarning):
        strip_normalize(tiny_model)
    assert not any(isinstance(m, Normalize) for m in tiny_model.modules())
    torch.testing.assert_close(tiny_model.encode_query(QUERIES, convert_to_tensor=True), q, rtol=1e-5, atol=1e-6)


def test_strip_normalize_bad_inputs(tmp_path, tiny_model):
    with pytest.raises(FileNotFoundError, match="modules.json"):
        strip_normalize(tmp_path / "nope")
    with pytest.raises(ValueError, match="similarity_fn_name must be one of"):
        strip_normalize(tiny_model, similarity_fn_name="qnorm")
    tiny_model.save(str(tmp_path / "m"))
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("x")
    with pytest.raises(FileExistsError, match="not empty"):
        strip_normalize(tmp_path / "m", tmp_path / "busy")


def test_role_normalize_rejects_unknown_roles(tiny_model):
    apply_similarity(tiny_model, "learnable", warn_on_strip=False)
    feats = {"sentence_embedding": torch.randn(2, 32)}
    with pytest.raises(ValueError, match="valid roles are 'query' and 'document'"):
        tiny_model[-1](feats, task="clustering")
    with pytest.raises(ValueError, match=r"open interval \(0, 1\)"):
        RoleNormalize(1.0, 0.5, learnable=True)
    with pytest.raises(ValueError, match="default_role"):
        RoleNormalize(default_role="passage")


def test_fixed_role_normalize_round_trips(tiny_model, tmp_path):
    # portable=False (the form legacy fit() can train) saves a fixed RoleNormalize: config only, no weights file
    apply_similarity(tiny_model, "dnorm", warn_on_strip=False, portable=False)
    d = tiny_model.encode_document(DOCS, convert_to_tensor=True)
    tiny_model.save(str(tmp_path / "m"))
    reloaded = SentenceTransformer(str(tmp_path / "m"), device="cpu", trust_remote_code=True)
    assert isinstance(reloaded[-1], RoleNormalize) and not reloaded[-1].learnable
    assert model_gammas(reloaded) == (0.0, 1.0)
    torch.testing.assert_close(reloaded.encode_document(DOCS, convert_to_tensor=True), d)


# --- truncation happens before the normalisation ---
@pytest.mark.parametrize("name", ["dnorm", "qnorm", "cosine", "learnable"])
def test_truncate_model_serves_the_similarity_of_truncated_raw_vectors(tiny_bert_dir, name):
    from conftest import build_tiny_st

    from st_magnitude import truncate_model

    raw = build_tiny_st(tiny_bert_dir, normalize=False)
    model = build_tiny_st(tiny_bert_dir, normalize=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        apply_similarity(model, name)
    truncate_model(model, 8)
    assert model.get_embedding_dimension() == 8 and model.truncate_dim is None
    served = model.similarity(
        model.encode_query(QUERIES, convert_to_tensor=True), model.encode_document(DOCS, convert_to_tensor=True)
    )
    rq, rd = raw.encode(QUERIES, convert_to_tensor=True)[:, :8], raw.encode(DOCS, convert_to_tensor=True)[:, :8]
    expected = get_similarity(name)(rq, rd)
    torch.testing.assert_close(served, expected, rtol=1e-5, atol=1e-6)
    assert model_gammas(model) == (CORNER_GAMMAS[name] if name != "learnable" else (0.5, 0.5))


def test_truncate_dim_after_normalize_is_refused_with_what_to_do(tiny_bert_dir, tmp_path):
    from conftest import build_tiny_st

    from st_magnitude import truncate_model
    from st_magnitude.model.truncation import check_truncation

    raw = build_tiny_st(tiny_bert_dir, normalize=False)
    model = build_tiny_st(tiny_bert_dir, normalize=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        apply_similarity(model, "dnorm")
    rq, rd = raw.encode(QUERIES, convert_to_tensor=True)[:, :8], raw.encode(DOCS, convert_to_tensor=True)[:, :8]
    expected = get_similarity("dnorm")(rq, rd)
    model.truncate_dim = 8  # ST's way: slices the *normalised* document vectors
    st_way = model.similarity(
        model.encode_query(QUERIES, convert_to_tensor=True), model.encode_document(DOCS, convert_to_tensor=True)
    )
    assert not torch.allclose(st_way, expected, rtol=1e-3)  # the defect the check guards against
    with pytest.raises(ValueError, match=r"truncate_model\(model, 8\)"):
        check_truncation(model)
    model.truncate_dim = None
    check_truncation(model)  # nothing to check
    # apply_similarity refuses a model that already truncates after its outputs
    other = build_tiny_st(tiny_bert_dir, normalize=True)
    other.truncate_dim = 8
    with pytest.raises(ValueError, match="truncate_model"):
        apply_similarity(other, "dnorm")
    # a truncated model saves with built-in modules only and reloads with the same scores
    truncate_model(model, 8)
    model.save(str(tmp_path / "m"))
    loaded = SentenceTransformer(str(tmp_path / "m"), device="cpu")
    got = loaded.similarity(
        loaded.encode_query(QUERIES, convert_to_tensor=True), loaded.encode_document(DOCS, convert_to_tensor=True)
    )
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"dim must be an int in \[1, 8\]"):
        truncate_model(loaded, 9)


# --- every saved model's card says how to encode queries/documents and what it needs ---
def _readme(model: SentenceTransformer, path) -> str:
    model.save(str(path))
    return (path / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", ["cosine", "dot", "qnorm", "dnorm", "learnable"])
def test_converted_model_card_says_how_to_encode_and_what_to_install(tiny_bert_dir, tmp_path, name):
    from conftest import build_tiny_st

    model = build_tiny_st(tiny_bert_dir, normalize=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        apply_similarity(model, name)
    card = _readme(model, tmp_path / "m")
    assert "model.encode_query(queries)" in card and "model.encode_document(documents)" in card
    assert "model.similarity(embeddings, embeddings)" not in card  # the symmetric snippet
    assert f"serve the **{name}** similarity" in card
    if name == "learnable":
        assert "pip install -U sentence-transformers st-magnitude" in card
        assert 'SentenceTransformer("sentence_transformers_model_id", trust_remote_code=True)' in card
    else:
        assert "needs `sentence-transformers` alone" in card
    if name in ("qnorm", "dnorm"):
        assert "not meant for symmetric tasks" in card


@pytest.mark.parametrize(
    ("similarity", "served"),
    [("qnorm", "qnorm"), ("dnorm", "dnorm"), (PowerNormSimilarity(0.25, 0.75), "fractional")],
)
def test_card_of_a_fixed_role_normalize_names_its_corner(tiny_bert_dir, tmp_path, similarity, served):
    # portable=False carries qnorm/dnorm as a fixed RoleNormalize: the card named it "fractional"
    from conftest import build_tiny_st

    model = build_tiny_st(tiny_bert_dir, normalize=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        apply_similarity(model, similarity, portable=False)
    card = _readme(model, tmp_path / "m")
    assert f"serve the **{served}** similarity" in card
    assert "pip install -U sentence-transformers st-magnitude" in card


def test_convert_writes_a_new_card_instead_of_the_base_readme(tiny_bert_dir, tmp_path):
    from conftest import build_tiny_st

    from st_magnitude.cli import main

    base = build_tiny_st(tiny_bert_dir, normalize=True)
    base.save(str(tmp_path / "base"))
    (tmp_path / "base" / "README.md").write_text("# base model\nUse F.normalize and cosine similarity.\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["convert", str(tmp_path / "base"), "dnorm", "-o", str(tmp_path / "out")]) == 0
    card = (tmp_path / "out" / "README.md").read_text(encoding="utf-8")
    assert "F.normalize" not in card and "serve the **dnorm** similarity" in card
    assert "model.encode_document(documents)" in card


def test_recipe_model_card_records_similarity_and_temperature(tiny_bert_dir, tmp_path):
    from conftest import build_tiny_st

    from st_magnitude.losses import BertRecipeLoss, EttinRecipeLoss

    bert = build_tiny_st(tiny_bert_dir, normalize=False)
    BertRecipeLoss(bert)
    card = _readme(bert, tmp_path / "bert")
    assert "score them with `model.similarity(...)` (dot)" in card and "temperature τ = 1;" in card
    assert "model.encode_query(queries)" in card
    ettin = build_tiny_st(tiny_bert_dir, normalize=True)
    EttinRecipeLoss(ettin, temperature=0.02)
    card = _readme(ettin, tmp_path / "ettin")
    assert "(cosine)" in card and "temperature τ = 0.02" in card and "scale = 1/τ = 50" in card


def test_card_of_a_model_fine_tuned_after_conversion(tiny_model, tmp_path):
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    apply_similarity(tiny_model, "learnable", warn_on_strip=False)
    data = Dataset.from_dict({"anchor": QUERIES, "positive": DOCS[:3]})  # no "query" column: ST cannot tell IR
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=1,
        per_device_train_batch_size=3,
        router_mapping={"anchor": "query", "positive": "document"},
        report_to=[],
        save_strategy="no",
        use_cpu=True,
    )
    loss = MultipleNegativesRankingLoss(tiny_model, similarity_fct=get_similarity("dot"))
    SentenceTransformerTrainer(model=tiny_model, args=args, train_dataset=data, loss=loss).train()
    card = _readme(tiny_model, tmp_path / "m")
    assert "generated_from_trainer" in card  # ST's trainer card, not a copied one
    assert "model.encode_query(queries)" in card and "model.similarity(embeddings, embeddings)" not in card
    assert "pip install -U sentence-transformers st-magnitude" in card and "trust_remote_code=True" in card


@pytest.mark.slow
@pytest.mark.timeout(3600)  # three MiniLM passes over 1,300 texts: ~15 min on the shared 2-core CPU
def test_truncate_model_on_minilm_scifact(minilm_dir, beir_dir):
    """Truncation before the normalisation on real data: dnorm MiniLM, 300 SciFact test queries, 1,000 docs (every
    judged doc + seeded distractors). Prints nDCG@10 of ST's truncate_dim, of dnorm on the truncated raw vectors
    and of truncate_model; ``pytest -m slow tests/test_convert.py -k minilm_scifact -s`` gives the table in
    docs/similarity.md."""
    import csv
    import random

    from st_magnitude import truncate_model
    from st_magnitude.evaluation.ir import exact_search, retrieval_metrics

    root = beir_dir / "scifact"
    corpus = {d["_id"]: d for d in map(json.loads, (root / "corpus.jsonl").open())}
    queries = {d["_id"]: d["text"] for d in map(json.loads, (root / "queries.jsonl").open())}
    qrels: dict[str, dict[str, int]] = {}
    with (root / "qrels" / "test.tsv").open() as fh:
        rows = csv.reader(fh, delimiter="\t")
        next(rows)
        for qid, did, score in rows:
            qrels.setdefault(qid, {})[did] = int(score)
    judged = sorted({d for v in qrels.values() for d in v})
    others = sorted(set(corpus) - set(judged))
    doc_ids = sorted(set(judged) | set(random.Random(0).sample(others, 1000 - len(judged))))
    qids = sorted(qrels)
    qtexts = [queries[q] for q in qids]
    dtexts = [(corpus[d].get("title", "") + " " + corpus[d]["text"]).strip() for d in doc_ids]

    def ndcg(q, d, fn):
        return retrieval_metrics(qrels, exact_search(q, d, qids, doc_ids, top_k=100, score_fn=fn))["ndcg@10"]

    raw = SentenceTransformer(modules=list(SentenceTransformer(str(minilm_dir), device="cpu"))[:-1], device="cpu")
    rq = raw.encode(qtexts, convert_to_tensor=True, batch_size=64)
    rd = raw.encode(dtexts, convert_to_tensor=True, batch_size=64)
    dnorm = get_similarity("dnorm")
    for k in (128, 64):
        reference = ndcg(rq[:, :k], rd[:, :k], dnorm)
        # ST's truncate_dim on a dnorm model: documents are normalised at 384 dims, then sliced
        st_way = ndcg(rq[:, :k], torch.nn.functional.normalize(rd, dim=-1)[:, :k], lambda a, b: a @ b.T)
        model = SentenceTransformer(str(minilm_dir), device="cpu")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            apply_similarity(model, "dnorm")
        truncate_model(model, k)
        mq = model.encode_query(qtexts, convert_to_tensor=True, batch_size=64)
        md = model.encode_document(dtexts, convert_to_tensor=True, batch_size=64)
        served = ndcg(mq, md, lambda a, b: model.similarity(a, b))
        print(
            f"k={k}: ST truncate_dim {st_way:.4f} | dnorm on truncated raw {reference:.4f} "
            f"| truncate_model {served:.4f}"
        )
        torch.testing.assert_close(model.similarity(mq, md), dnorm(rq[:, :k], rd[:, :k]), rtol=1e-4, atol=1e-4)
        assert served == pytest.approx(reference, abs=1e-4)


def test_stripped_model_card_is_regenerated(tiny_bert_dir, tmp_path):
    from conftest import build_tiny_st

    base = build_tiny_st(tiny_bert_dir, normalize=True)
    base.save(str(tmp_path / "base"))
    (tmp_path / "base" / "README.md").write_text("# base model\nUse F.normalize and cosine similarity.\n")
    model = SentenceTransformer(str(tmp_path / "base"), device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        strip_normalize(model)
    card = _readme(model, tmp_path / "stripped")
    assert "F.normalize" not in card and "serve the **dot** similarity" in card
