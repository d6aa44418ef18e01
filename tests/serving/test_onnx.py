"""ONNX export per role: ONNX Runtime reproduces encode_query / encode_document and the exact top-10; the fused f32
graphs stay within 1e-5 and the int8 graphs are quantized as documented; the export writes only a new or empty folder,
through a staging folder, and the encoder refuses graphs that do not belong together."""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pytest
from conftest import build_tiny_st
from helpers.deploy_kit import TOY_DOCS, TOY_QUERIES
from helpers.onnx_export import reseal
from helpers.onnx_marks import ONNX_MARKS

from st_magnitude import apply_similarity, convert_for_store
from st_magnitude._trust import InputFileError
from st_magnitude.serving.agreement import reference_ranking

pytestmark = [
    pytest.mark.filterwarnings("ignore::st_magnitude.MagnitudeCollapseWarning"),
    *ONNX_MARKS,
]


def _ops(path) -> set[str]:
    import onnx

    return {n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node}


@pytest.fixture(scope="module")
def exported(tiny_bert_dir, tmp_path_factory):
    """A qnorm tiny model and its default (fused f32) export, made once for the module (copy it before changing)."""
    from st_magnitude.serving.onnx import export_onnx

    model = apply_similarity(build_tiny_st(tiny_bert_dir), "qnorm")
    return model, export_onnx(model, tmp_path_factory.mktemp("onnx") / "qnorm")


@pytest.mark.parametrize(("variant", "store", "optimize"), [("qnorm", "dot", True), ("learnable", "cosine", False)])
def test_onnx_graphs_match_the_model(tiny_bert_dir, tmp_path, variant, store, optimize):
    from st_magnitude.serving.onnx import OnnxEncoder, export_onnx

    model = convert_for_store(build_tiny_st(tiny_bert_dir), variant, store, documents=TOY_DOCS)
    folder = export_onnx(model, tmp_path / "onnx", optimize=optimize)
    # the fusions happened (or not): one Attention node per layer instead of MatMul/Softmax chains
    assert ("Attention" in _ops(folder / "document.onnx")) is optimize
    enc = OnnxEncoder(folder)
    q, d = enc.encode_query(TOY_QUERIES, batch_size=3), enc.encode_document(TOY_DOCS, batch_size=7)
    assert np.abs(q - model.encode_query(TOY_QUERIES, convert_to_numpy=True)).max() <= 1e-5
    assert np.abs(d - model.encode_document(TOY_DOCS, convert_to_numpy=True)).max() <= 1e-5
    # the top-10 of the ONNX vectors (dot; exact, ties by position) is the trained model's exact search
    trained = apply_similarity(build_tiny_st(tiny_bert_dir), variant)
    scores = q.astype(np.float64) @ d.astype(np.float64).T
    got = [list(np.lexsort((np.arange(len(row)), -row))[:10]) for row in scores]
    assert got == reference_ranking(trained, TOY_QUERIES, TOY_DOCS)


def test_length_sorted_batches_keep_the_input_order(exported):
    from st_magnitude.serving.onnx import OnnxEncoder

    model, folder = exported
    enc = OnnxEncoder(folder, threads=1)
    texts = [TOY_DOCS[0] * 3, "a", TOY_DOCS[1], "short one", TOY_DOCS[2] * 2]
    one_by_one = np.concatenate([enc.encode_document([t]) for t in texts])
    batched = enc.encode_document(texts, batch_size=2)
    assert np.abs(batched - one_by_one).max() <= 1e-5
    assert np.abs(batched - model.encode_document(texts, convert_to_numpy=True)).max() <= 1e-5
    assert enc.encode_query([]).shape == (0, model.get_embedding_dimension())


def test_int8_quantizes_weights_and_keeps_the_named_matmuls_in_f32(exported, tmp_path):
    import onnx

    from st_magnitude.serving.onnx import OnnxEncoder, export_onnx

    model, _ = exported
    folder = export_onnx(model, tmp_path / "int8", quantize="int8")
    graph = onnx.load(str(folder / "document.onnx")).graph
    ops = {n.op_type for n in graph.node}
    assert {"MatMulInteger", "QAttention"} <= ops
    kept = [n.name for n in graph.node if n.op_type == "MatMul"]
    assert kept and all(name.endswith("/output/dense/MatMul") and "attention" not in name for name in kept)
    config = json.loads((folder / "st_magnitude_onnx.json").read_text())
    assert config["quantize"] == "int8" and config["keep_f32"]
    d = OnnxEncoder(folder).encode_document(TOY_DOCS)
    ref = model.encode_document(TOY_DOCS, convert_to_numpy=True)
    cos = (d * ref).sum(1) / np.linalg.norm(d, axis=1) / np.linalg.norm(ref, axis=1)
    assert 0 < np.abs(d - ref).max() and cos.min() > 0.9  # quantized: close, not equal


def test_bad_settings_are_refused_before_any_work(exported, tmp_path):
    from st_magnitude.serving.onnx import export_onnx

    model, _ = exported
    with pytest.raises(ValueError, match="quantize must be one of none, int8"):
        export_onnx(model, tmp_path / "x", quantize="int4")
    with pytest.raises(ValueError, match="keep_f32 must be a regular expression"):
        export_onnx(model, tmp_path / "x", quantize="int8", keep_f32="(")
    for opset in (0, -5, 13, 21, 99999, 17.0, True):  # torch's exporter fails late, in tracebacks, on these
        with pytest.raises(ValueError, match="opset must be an integer from 14 to 20"):
            export_onnx(model, tmp_path / "x", opset)
    assert not (tmp_path / "x").exists()


def _digest(folder) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def test_a_non_empty_folder_is_refused_and_left_as_it_was(exported, saved_tiny):
    from st_magnitude.serving.onnx import export_onnx

    model, _ = exported
    before = _digest(saved_tiny)  # a model folder: its tokenizer must not be overwritten
    with pytest.raises(FileExistsError, match="not empty"):
        export_onnx(model, saved_tiny)
    assert _digest(saved_tiny) == before
    assert [p.name for p in saved_tiny.parent.iterdir() if p.name.startswith(".")] == []


def test_an_interrupted_export_leaves_nothing(exported, tmp_path, monkeypatch):
    import st_magnitude.serving.onnx as onnx_module

    model, _ = exported
    calls = []

    def fail_on_second(path, model):
        calls.append(path.name)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return {}

    monkeypatch.setattr(onnx_module, "fuse", fail_on_second)
    (tmp_path / "empty").mkdir()
    for target in (tmp_path / "new", tmp_path / "empty"):
        calls.clear()
        with pytest.raises(KeyboardInterrupt):
            onnx_module.export_onnx(model, target)
        assert calls == ["query.onnx", "document.onnx"]  # the query graph was done when it stopped
    assert not (tmp_path / "new").exists()
    assert list((tmp_path / "empty").iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]  # no staging folder left behind


def test_graphs_of_another_export_are_refused_naming_the_file(exported, tiny_bert_dir, tmp_path):
    from st_magnitude.serving.onnx import OnnxEncoder, export_onnx

    _, folder_a = exported
    other = apply_similarity(build_tiny_st(tiny_bert_dir, seed=1), "qnorm")
    folder_b = export_onnx(other, tmp_path / "b", optimize=False)
    mixed = shutil.copytree(folder_a, tmp_path / "mixed")
    shutil.copy(folder_b / "query.onnx", mixed / "query.onnx")  # model B's query graph, model A's document graph
    with pytest.raises(InputFileError, match=r"query\.onnx: has sha256 .* not the .* st_magnitude_onnx\.json"):
        OnnxEncoder(mixed)
    reseal(mixed)  # digests recorded anew: the stamp is the check behind them
    with pytest.raises(InputFileError, match=r"query\.onnx: carries identity .* not the .* st_magnitude_onnx\.json"):
        OnnxEncoder(mixed)
    swapped = shutil.copytree(folder_a, tmp_path / "swapped")
    shutil.copy(folder_a / "document.onnx", swapped / "query.onnx")
    reseal(swapped)
    with pytest.raises(InputFileError, match=r"query\.onnx: is the 'document' graph"):
        OnnxEncoder(swapped)
    (swapped / "query.onnx").unlink()
    with pytest.raises(InputFileError, match=r"query\.onnx: is missing"):
        OnnxEncoder(swapped)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"identity": "abc"}, r"key 'identity': must be a sha256"),
        ({"inputs": ["input_ids", "../x"]}, r"key 'inputs': must list distinct names"),
        ({"quantize": "int4"}, r"key 'quantize': must be one of"),
        ({"max_seq_length": 0}, r"key 'max_seq_length': must be ≥ 1"),
        ({"extra": 1}, r"key 'extra': is not a key this file may have"),
    ],
)
def test_a_malformed_config_is_refused_naming_the_key(exported, tmp_path, change, message):
    from st_magnitude.serving.onnx import OnnxEncoder

    _, folder = exported
    copy = shutil.copytree(folder, tmp_path / "copy")
    path = copy / "st_magnitude_onnx.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    with pytest.raises(InputFileError, match=r"st_magnitude_onnx\.json: " + message):
        OnnxEncoder(copy)


def test_missing_export_is_named(tmp_path):
    from st_magnitude.serving.onnx import OnnxEncoder

    with pytest.raises(FileNotFoundError, match="export_onnx"):
        OnnxEncoder(tmp_path)
