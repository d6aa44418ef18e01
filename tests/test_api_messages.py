"""Bad values handed to the Python API and the CLI name themselves: a path where a loaded model belongs, ``None``,
the abstract ``Similarity``, an empty model path, an HNSW bound past what a graph can hold."""

from __future__ import annotations

import os

import pytest
import torch
from helpers.extras import need_extra

from st_magnitude import Similarity, is_asymmetric, model_similarity
from st_magnitude.cli import main


def test_a_path_where_a_loaded_model_belongs_is_named():
    with pytest.raises(TypeError, match=r"'/nonexistent'.*load_model"):
        model_similarity("/nonexistent")


def test_none_where_a_model_belongs_is_named():
    with pytest.raises(TypeError, match=r"SentenceTransformer.*got None"):
        is_asymmetric(None)


def test_the_abstract_similarity_names_itself():
    with pytest.raises(NotImplementedError, match=r"Similarity.*forward.*get_similarity"):
        Similarity()(torch.randn(2, 4), torch.randn(3, 4))
    with pytest.raises(NotImplementedError, match=r"Similarity.*symmetric"):
        Similarity().symmetric


def test_an_empty_model_path_is_one_line_and_reads_nothing(tmp_path, monkeypatch, capsys):
    from st_magnitude.model.load import load_model

    monkeypatch.chdir(tmp_path)  # the current folder: what '' used to be read as
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="model path is empty"):
        load_model("")
    capsys.readouterr()
    assert main(["evaluate", "", "--data", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "model path is empty" in err and "Traceback" not in err
    assert os.listdir(tmp_path) == ["config.json"]


def test_chroma_max_neighbors_is_bounded():
    need_extra("chromadb")
    from st_magnitude.serving.chroma import MAX_NEIGHBORS, chroma_collection

    for value in (10**12, MAX_NEIGHBORS + 1):
        with pytest.raises(ValueError, match=rf"max_neighbors must be an integer in \[1, {MAX_NEIGHBORS}\]"):
            chroma_collection(None, "c", None, "ip", max_neighbors=value)
