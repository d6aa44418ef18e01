"""Model surgery removes only a trailing Normalize.

A ``Normalize`` that feeds a later module (``[Transformer, Pooling, Normalize, Dense]``) is part of the encoder:
``apply_similarity``, ``strip_normalize`` and the "raw" model used by evaluate/diagnose keep it (with a warning), so
the embeddings do not change. In-place folder ``strip`` is atomic: a failure leaves the original folder whole.
"""

from __future__ import annotations

import json
import shutil
import warnings

import pytest
import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.base.modules import Normalize, Transformer
from sentence_transformers.sentence_transformer.modules import Dense, Pooling

from st_magnitude import apply_similarity, strip_normalize
from st_magnitude.model.load import raw_model


def _normalize_then_dense(hf_dir, trailing: bool = False) -> SentenceTransformer:
    torch.manual_seed(0)
    transformer = Transformer(str(hf_dir), max_seq_length=32)
    dim = transformer.get_embedding_dimension()
    modules = [transformer, Pooling(dim, pooling_mode="mean"), Normalize(), Dense(dim, 16, activation_function=None)]
    return SentenceTransformer(modules=modules + ([Normalize()] if trailing else []), device="cpu")


def _encode(model, sentences):
    with torch.no_grad():
        return model.encode_query(sentences, convert_to_tensor=True), model.encode_document(
            sentences, convert_to_tensor=True
        )


def test_apply_similarity_keeps_a_normalize_that_feeds_a_dense(tiny_bert_dir, sentences):
    model = _normalize_then_dense(tiny_bert_dir)
    ref_q, ref_d = _encode(model, sentences)
    with pytest.warns(UserWarning, match="feed later modules"):
        apply_similarity(model, "dot")
    q, d = _encode(model, sentences)
    torch.testing.assert_close(q, ref_q)
    torch.testing.assert_close(d, ref_d)


def test_qnorm_on_normalize_dense_normalize_removes_only_the_trailing_one(tiny_bert_dir, sentences):
    model = _normalize_then_dense(tiny_bert_dir, trailing=True)
    inner = _normalize_then_dense(tiny_bert_dir)  # same seed: same weights, no trailing Normalize
    ref = inner.encode_document(sentences, convert_to_tensor=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        apply_similarity(model, "qnorm")
    q, d = _encode(model, sentences)
    torch.testing.assert_close(d, ref)  # documents: raw output of [T, P, Normalize, Dense]
    torch.testing.assert_close(q, torch.nn.functional.normalize(ref, dim=-1))


def test_raw_model_keeps_the_inner_normalize(tiny_bert_dir, sentences):
    model = _normalize_then_dense(tiny_bert_dir, trailing=True)
    inner = _normalize_then_dense(tiny_bert_dir)
    raw = raw_model(model)
    torch.testing.assert_close(
        raw.encode_document(sentences, convert_to_tensor=True),
        inner.encode_document(sentences, convert_to_tensor=True),
    )


def test_strip_normalize_loaded_and_saved_keeps_the_inner_normalize(tiny_bert_dir, sentences, tmp_path):
    model = _normalize_then_dense(tiny_bert_dir)
    ref = model.encode(sentences, convert_to_tensor=True)
    model.save(str(tmp_path / "m"))
    with pytest.warns(UserWarning, match="feed later modules"):
        stripped = strip_normalize(_normalize_then_dense(tiny_bert_dir))
    torch.testing.assert_close(stripped.encode(sentences, convert_to_tensor=True), ref)
    with pytest.warns(UserWarning, match="feed later modules"):
        strip_normalize(tmp_path / "m", tmp_path / "s")
    reloaded = SentenceTransformer(str(tmp_path / "s"), device="cpu")
    torch.testing.assert_close(reloaded.encode(sentences, convert_to_tensor=True), ref)


def test_strip_still_removes_a_trailing_and_a_route_end_normalize(tiny_model, tmp_path):
    with pytest.warns(UserWarning):
        stripped = strip_normalize(tiny_model)
    assert not any(isinstance(m, Normalize) for m in stripped)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        apply_similarity(tiny_model, "qnorm").save(str(tmp_path / "q"))
    with pytest.warns(UserWarning, match="removed 1 Normalize"):
        strip_normalize(tmp_path / "q")
    root = tmp_path / "q"
    router = next(p for p in [root, *root.iterdir()] if (p / "router_config.json").is_file())
    types = json.loads((router / "router_config.json").read_text())["types"]
    assert not any(t.endswith("Normalize") for t in types.values())


def test_in_place_strip_is_atomic(tiny_model, tmp_path):
    folder = tmp_path / "model"
    tiny_model.save(str(folder))
    # make the last write of the strip fail: config_sentence_transformers.json cannot be replaced by a file
    cfg = folder / "config_sentence_transformers.json"
    cfg.unlink()
    cfg.mkdir()
    (cfg / "keep").write_text("x")
    before = {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    with pytest.raises(OSError):
        strip_normalize(folder)
    after = {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert after == before  # Normalize folder and modules.json untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no staging folder left


def test_in_place_strip_result_loads(tiny_model, sentences, tmp_path):
    folder = tmp_path / "model"
    tiny_model.save(str(folder))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        strip_normalize(folder)
        raw = strip_normalize(tiny_model)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    reloaded = SentenceTransformer(str(folder), device="cpu")
    assert reloaded.similarity_fn_name == "dot"
    torch.testing.assert_close(
        reloaded.encode(sentences, convert_to_tensor=True), raw.encode(sentences, convert_to_tensor=True)
    )
    shutil.rmtree(folder)
