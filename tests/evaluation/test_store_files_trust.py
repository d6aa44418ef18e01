"""The files ``encode_to_store`` reads back (its progress JSON, the ``.npy`` header) go through the trust boundary.

Before: the progress file was ``json.loads`` plus ``int(state["done"])``: ``"done": -20`` resumed at row -20 (the
encoder got an empty list), ``"done": 25`` with 10 rows made the finished store "complete" without those rows ever
written, ``"dim": "x"`` or unknown keys passed, a lone surrogate or NaN passed; a ``.npy`` file whose header numpy
cannot parse surfaced as numpy's ``ValueError`` without the file.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from st_magnitude._trust import InputFileError
from st_magnitude.evaluation.embeddings_store import EmbeddingStore, encode_to_store

TEXTS = [f"document number {i}" for i in range(20)]


class Fake:
    """A deterministic encoder (8 numbers per text)."""

    def encode_document(self, texts, **kwargs):
        rows = [np.frombuffer(hashlib.sha256(t.encode()).digest(), dtype=np.uint8)[:8] for t in texts]
        return np.asarray(rows, dtype=np.float32)


@pytest.fixture
def started(tmp_path):
    """A finished store and its progress file (rewritten by each case)."""
    path = tmp_path / "corpus.npy"
    encode_to_store(Fake(), TEXTS, path, block_size=10, show_progress_bar=False)
    progress = tmp_path / "corpus.npy.progress.json"
    return path, progress, json.loads(progress.read_text())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"done": -20}, r"key 'done': must be ≥ 0"),
        ({"done": 25}, r"key 'done': must be ≤ 20"),
        ({"done": "10"}, r"key 'done': must be an integer, got a string"),
        ({"done": True}, r"key 'done': must be an integer, got a boolean"),
        ({"dim": 0}, r"key 'dim': must be ≥ 1"),
        ({"dtype": "float64"}, r"key 'dtype': must be one of"),
        ({"role": "both"}, r"key 'role': must be one of"),
        ({"texts_sha256": "../x"}, r"key 'texts_sha256': must be a SHA-256 hex digest"),
        ({"encode_kwargs": {"a": 1}}, r"key 'encode_kwargs': must map each argument to its repr"),
        ({"extra": 1}, r"key 'extra': is not a key this file may have"),
    ],
    ids=lambda v: next(iter(v)) + "=" + repr(next(iter(v.values()))) if isinstance(v, dict) else None,
)
def test_a_progress_file_with_a_wrong_value_names_the_key_and_how_to_start_over(started, change, message):
    path, progress, state = started
    progress.write_text(json.dumps({**state, **change}))
    with pytest.raises(InputFileError, match=message) as info:
        encode_to_store(Fake(), TEXTS, path, block_size=10, show_progress_bar=False)
    assert info.value.file == str(progress) and "pass resume=False to encode again" in str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"done": NaN}', r"progress\.json:1: NaN is not a number"),
        ('{"n": 20, "dtype": "\\ud800"}', r"holds a lone surrogate"),
        ("[1, 2]", r"must hold a JSON object, got a list"),
        ("{not json", r"progress\.json:1: not valid JSON"),
    ],
    ids=["nan", "surrogate", "list", "broken"],
)
def test_a_progress_file_that_is_no_json_object_is_one_error(started, text, message):
    path, progress, _ = started
    progress.write_text(text)
    with pytest.raises(InputFileError, match=message):
        encode_to_store(Fake(), TEXTS, path, block_size=10, show_progress_bar=False)


def test_a_valid_progress_file_still_resumes_to_the_same_store(started):
    path, progress, state = started
    reference = EmbeddingStore(path).read()
    progress.write_text(json.dumps({**state, "done": 10}))
    store = encode_to_store(Fake(), TEXTS, path, block_size=10, show_progress_bar=False)
    np.testing.assert_array_equal(store.read(), reference)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"not a numpy file at all", r"corpus\.npy: is not a \.npy file"),
        (b"\x93NUMPY\x01\x00\x10\x00{'descr': 'q", r"corpus\.npy: is not a \.npy file"),
    ],
    ids=["no-magic", "cut-header"],
)
def test_an_embedding_file_numpy_cannot_parse_is_one_error_naming_it(tmp_path, data, message):
    (tmp_path / "corpus.npy").write_bytes(data)
    with pytest.raises(InputFileError, match=message):
        EmbeddingStore(tmp_path / "corpus.npy")


def test_an_embedding_file_of_the_wrong_shape_or_size_names_it(tmp_path):
    np.save(tmp_path / "corpus.npy", np.zeros((3, 4, 2), dtype=np.float32))
    with pytest.raises(InputFileError, match=r"corpus\.npy: must hold a 2-D C-order array"):
        EmbeddingStore(tmp_path / "corpus.npy")
    np.save(tmp_path / "corpus.npy", np.zeros((30, 4), dtype=np.float32))
    raw = (tmp_path / "corpus.npy").read_bytes()
    (tmp_path / "corpus.npy").write_bytes(raw[:-40])
    with pytest.raises(InputFileError, match=r"corpus\.npy: is truncated"):
        EmbeddingStore(tmp_path / "corpus.npy")
