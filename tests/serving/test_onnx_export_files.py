"""An ONNX export is trusted by its files, not by a stamp: ``st_magnitude_onnx.json`` records a sha256 of every file
the export wrote, and :class:`OnnxEncoder` refuses a changed, swapped, added or linked file naming it; a config whose
values do not match the graphs, a provider ONNX Runtime does not have, a graph that computes NaN, and a model with
non-finite weights at export are each one clear error."""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pytest
from conftest import build_tiny_st
from helpers.deploy_kit import TOY_DOCS, TOY_QUERIES
from helpers.onnx_export import CONFIG, edit_config, reseal
from helpers.onnx_marks import ONNX_MARKS

from st_magnitude import apply_similarity
from st_magnitude._trust import InputFileError

pytestmark = [
    pytest.mark.filterwarnings("ignore::st_magnitude.MagnitudeCollapseWarning"),
    *ONNX_MARKS,
]


@pytest.fixture(scope="module")
def export_a(tiny_bert_dir, tmp_path_factory):
    """A qnorm tiny model and its export (graphs as traced, for speed), made once: copy it before changing."""
    from st_magnitude.serving.onnx import export_onnx

    model = apply_similarity(build_tiny_st(tiny_bert_dir), "qnorm")
    return model, export_onnx(model, tmp_path_factory.mktemp("onnx") / "a", optimize=False)


@pytest.fixture
def copy_a(export_a, tmp_path):
    return shutil.copytree(export_a[1], tmp_path / "copy")


def test_the_config_records_a_digest_of_every_file(export_a):
    _, folder = export_a
    config = json.loads((folder / CONFIG).read_text())
    written = sorted(p.name for p in folder.iterdir() if p.name != CONFIG)
    assert sorted(config["files"]) == written
    for name, digest in config["files"].items():
        assert digest == hashlib.sha256((folder / name).read_bytes()).hexdigest()


def test_a_permuted_vocabulary_is_refused_naming_the_tokenizer(copy_a):
    from st_magnitude.serving.onnx import OnnxEncoder

    path = copy_a / "tokenizer.json"
    tok = json.loads(path.read_text())
    vocab = tok["model"]["vocab"]
    words = sorted(w for w in vocab if not w.startswith("["))[:40]
    ids = [vocab[w] for w in words]
    for w, i in zip(words, ids[1:] + ids[:1]):  # the same words under each other's ids
        vocab[w] = i
    path.write_text(json.dumps(tok))
    with pytest.raises(InputFileError, match=r"tokenizer\.json: .*sha256.*st_magnitude_onnx\.json"):
        OnnxEncoder(copy_a)


def test_a_graph_of_another_export_with_the_stamp_copied_is_refused(export_a, tiny_bert_dir, copy_a, tmp_path):
    import torch

    from st_magnitude.serving.onnx import OnnxEncoder, export_onnx
    from st_magnitude.serving.onnx_graphs import stamp

    other = apply_similarity(build_tiny_st(tiny_bert_dir), "qnorm")
    with torch.no_grad():
        next(iter(other.parameters())).mul_(1.5)  # other weights, the same settings
    folder_b = export_onnx(other, tmp_path / "b", optimize=False)
    identity = json.loads((copy_a / CONFIG).read_text())["identity"]
    shutil.copy(folder_b / "query.onnx", copy_a / "query.onnx")
    stamp(copy_a / "query.onnx", identity, "query")  # B's graph carrying A's stamp
    with pytest.raises(InputFileError, match=r"query\.onnx: .*sha256"):
        OnnxEncoder(copy_a)


def test_a_file_linked_outside_the_folder_is_refused(copy_a, tmp_path):
    from st_magnitude.serving.onnx import OnnxEncoder

    outside = tmp_path / "elsewhere.json"
    shutil.copy(copy_a / "tokenizer.json", outside)  # the same bytes: only the link is wrong
    (copy_a / "tokenizer.json").unlink()
    (copy_a / "tokenizer.json").symlink_to(outside)
    with pytest.raises(InputFileError, match=r"tokenizer\.json: .*outside the export folder"):
        OnnxEncoder(copy_a)


def test_a_file_the_export_did_not_write_is_refused(copy_a):
    from st_magnitude.serving.onnx import OnnxEncoder

    (copy_a / "special_tokens_map.json").write_text('{"unk_token": "[SEP]"}')  # transformers would read it
    with pytest.raises(InputFileError, match=r"special_tokens_map\.json: .*not a file the export wrote"):
        OnnxEncoder(copy_a)


def test_a_missing_file_is_refused(copy_a):
    from st_magnitude.serving.onnx import OnnxEncoder

    (copy_a / "tokenizer_config.json").unlink()
    with pytest.raises(InputFileError, match=r"tokenizer_config\.json: .*missing"):
        OnnxEncoder(copy_a)


def test_a_graph_computing_nan_is_refused_at_encode(copy_a):
    import onnx
    from onnx import numpy_helper

    from st_magnitude.serving.onnx import OnnxEncoder

    path = copy_a / "document.onnx"
    graph = onnx.load(str(path))
    init = next(t for t in graph.graph.initializer if t.data_type == onnx.TensorProto.FLOAT and "bias" in t.name)
    values = numpy_helper.to_array(init).copy()
    values.flat[0] = np.nan
    init.CopyFrom(numpy_helper.from_array(values, init.name))
    onnx.save(graph, str(path))
    reseal(copy_a)
    enc = OnnxEncoder(copy_a)
    assert np.isfinite(enc.encode_query(TOY_QUERIES)).all()
    with pytest.raises(ValueError, match=r"document at index 0 encodes to a vector with NaN or inf"):
        enc.encode_document(TOY_DOCS)


def test_a_tokenizer_config_that_is_not_json_is_named(copy_a):
    from st_magnitude.serving.onnx import OnnxEncoder

    (copy_a / "tokenizer_config.json").write_text('{"model_max_length": 32,')
    reseal(copy_a)
    with pytest.raises(InputFileError, match=r"tokenizer_config\.json:1: not valid JSON"):
        OnnxEncoder(copy_a)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"dimension": 16}, r"key 'dimension': is 16, but query\.onnx outputs vectors of 32"),
        ({"dimension": 10**12}, r"key 'dimension': is 1000000000000, but query\.onnx outputs vectors of 32"),
        ({"similarity": "jaccard"}, r"key 'similarity': must be one of"),
        ({"keep_f32": "("}, r"key 'keep_f32': must be a regular expression"),
        ({"keep_f32": "MatMul"}, r"key 'keep_f32': must be '' when 'quantize' is 'none'"),
        ({"files": {"query.onnx": "0" * 64}}, r"key 'files': must list both graphs"),
        ({"files": {"../query.onnx": "0" * 64}}, r"key 'files': .*must be a name"),
    ],
)
def test_config_values_are_checked_against_the_graphs(copy_a, change, message):
    from st_magnitude.serving.onnx import OnnxEncoder

    edit_config(copy_a, **change)
    with pytest.raises(InputFileError, match=r"st_magnitude_onnx\.json: " + message):
        OnnxEncoder(copy_a)


def test_an_unknown_provider_is_refused_naming_the_available_ones(export_a):
    from st_magnitude.serving.onnx import OnnxEncoder

    with pytest.raises(ValueError, match=r"'FooExecutionProvider'.*available.*CPUExecutionProvider"):
        OnnxEncoder(export_a[1], providers=["FooExecutionProvider"])


def test_a_model_with_non_finite_weights_is_not_exported(export_a, tmp_path):
    import torch

    from st_magnitude.serving.onnx import export_onnx

    model, _ = export_a
    param_name, param = next(iter(model.named_parameters()))
    saved = param.detach().clone()
    try:
        with torch.no_grad():
            param.view(-1)[3] = float("nan")
        with pytest.raises(ValueError, match=rf"{param_name}.*1 NaN"):
            export_onnx(model, tmp_path / "nan", optimize=False)
    finally:
        with torch.no_grad():
            param.copy_(saved)
    assert not (tmp_path / "nan").exists()


def test_export_cli_refuses_non_finite_weights_in_one_line(tiny_model, tmp_path, capsys):
    import torch

    from st_magnitude.cli import main

    with torch.no_grad():
        next(iter(tiny_model.parameters())).view(-1)[0] = float("inf")
    tiny_model.save(str(tmp_path / "m"))
    assert main(["export", str(tmp_path / "m"), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("st-magnitude ")]
    assert len(lines) == 1 and "1 infinite value(s)" in lines[0] and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_a_text_that_is_no_string_is_named_by_its_index(export_a):
    from st_magnitude.serving.onnx import OnnxEncoder

    enc = OnnxEncoder(export_a[1])
    with pytest.raises(ValueError, match=r"the query at index 0 is None, not a string"):
        enc.encode_query([None, "a"])
    with pytest.raises(ValueError, match=r"the document at index 1 is int 5, not a string"):
        enc.encode_document(["a", 5])


# --- the position limit and graphs ONNX Runtime cannot load ------------------------------------------------------

LONG_TEXT = " ".join(["vitamin"] * 200)  # far more tokens than the tiny backbone's 128 positions


def test_the_export_records_the_backbones_position_limit_in_the_config_and_the_graphs(export_a):
    import onnx

    _, folder = export_a
    assert json.loads((folder / CONFIG).read_text())["position_limit"] == 128  # the tiny BERT's positions
    for graph in ("query.onnx", "document.onnx"):
        meta = {p.key: p.value for p in onnx.load(str(folder / graph), load_external_data=False).metadata_props}
        assert meta["st_magnitude.position_limit"] == "128"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        # a longer max_seq_length than the positions: before, accepted, and the first long text failed in ONNX Runtime
        ({"max_seq_length": 10**9}, r"key 'max_seq_length': is 1000000000, more than the 128 tokens .*: 1 to 128"),
        ({"max_seq_length": 129}, r"key 'max_seq_length': is 129, more than the 128 tokens"),
        # the limit rewritten with it: the graphs carry the one they were exported with
        ({"max_seq_length": 10**9, "position_limit": 10**9}, r"key 'position_limit': is 1000000000, but query\.onnx"),
        ({"position_limit": 2**63}, r"key 'position_limit': is 9223372036854775808, but query\.onnx .* 128"),
        ({"position_limit": None}, r"key 'position_limit': is None, but query\.onnx .* 128"),
        ({"position_limit": 0}, r"key 'position_limit': must be ≥ 1, got 0"),
        ({"position_limit": -1}, r"key 'position_limit': must be ≥ 1, got -1"),
        ({"position_limit": "128"}, r"key 'position_limit': must be an integer or null, got a string '128'"),
        ({"position_limit": 128.0}, r"key 'position_limit': must be an integer or null, got a number 128\.0"),
        ({"position_limit": True}, r"key 'position_limit': must be an integer or null, got a boolean True"),
        ({"max_seq_length": True}, r"key 'max_seq_length': must be an integer or null, got a boolean True"),
    ],
)
def test_a_max_seq_length_beyond_the_recorded_position_limit_is_refused_at_load(copy_a, change, message):
    from st_magnitude.serving.onnx import OnnxEncoder

    edit_config(copy_a, **change)
    with pytest.raises(InputFileError, match=r"st_magnitude_onnx\.json: " + message):
        OnnxEncoder(copy_a)


def test_an_export_that_records_no_position_limit_is_refused(copy_a):
    from st_magnitude.serving.onnx import OnnxEncoder

    config = json.loads((copy_a / CONFIG).read_text())
    del config["position_limit"]
    config["max_seq_length"] = 10**9
    (copy_a / CONFIG).write_text(json.dumps(config))
    with pytest.raises(InputFileError, match=r"key 'position_limit': is missing: .*re-export the model"):
        OnnxEncoder(copy_a)


def test_the_recorded_limit_truncates_when_the_config_states_no_max_seq_length(copy_a):
    from st_magnitude.serving.onnx import OnnxEncoder

    edit_config(copy_a, max_seq_length=None)  # allowed (a tokenizer without a length): the positions still bound it
    vectors = OnnxEncoder(copy_a).encode_document([LONG_TEXT, "a short one"])
    assert vectors.shape == (2, 32) and np.isfinite(vectors).all()


@pytest.mark.parametrize(
    "damage",
    ["empty", "one byte", "half", "all but one byte", "junk appended"],
)
def test_a_graph_onnx_runtime_cannot_load_is_one_line_naming_it_even_with_its_digest_recorded_anew(copy_a, damage):
    from st_magnitude.serving.onnx import OnnxEncoder

    path = copy_a / "document.onnx"
    raw = path.read_bytes()
    cut = {"empty": b"", "one byte": raw[:1], "half": raw[: len(raw) // 2], "all but one byte": raw[:-1]}
    path.write_bytes(cut.get(damage, raw + b"\xff\xff\xff"))
    reseal(copy_a)  # the digest matches the damaged file: ONNX Runtime is the first to read it
    with pytest.raises(InputFileError) as caught:
        OnnxEncoder(copy_a)
    message = str(caught.value)
    assert message.startswith(f"{path}: is not a graph ONNX Runtime can load") and "re-export" in message
    assert "\n" not in message and len(message) < 600
