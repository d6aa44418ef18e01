"""One data setting (data_home): the flag, $ST_MAGNITUDE_DATA, the user cache; the download."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
from helpers.toy_beir import write_toy_beir

import st_magnitude
from st_magnitude.data import home as data_home
from st_magnitude.data.home import (
    DATA_ENV,
    default_data_dir,
    download_beir,
    resolve_data_dir,
    resolve_dataset,
)


@pytest.fixture(autouse=True)
def _no_data_setting(monkeypatch, tmp_path):
    for var in (DATA_ENV,):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


@pytest.fixture
def data(tmp_path) -> Path:
    root = tmp_path / "data"
    write_toy_beir(root / "beir" / "toy", n_docs=8, n_queries=2)
    write_toy_beir(root / "beir" / "toy", n_docs=8, n_queries=2, split="train", seed=1)
    return root


def _offline(monkeypatch, calls: list | None = None):
    """BEIR's downloader fails as it does without a network."""
    from beir import util

    def fail(url, out_dir):
        if calls is not None:
            calls.append((url, out_dir))
        raise ConnectionError("no network")

    monkeypatch.setattr(util, "download_and_unzip", fail)


def test_the_flag_wins_then_the_variable_then_the_user_cache(data, tmp_path, monkeypatch):
    other = tmp_path / "other"
    other.mkdir()
    assert default_data_dir() == tmp_path / "cache" / "st_magnitude" / "data"
    assert resolve_data_dir() == default_data_dir()  # need not exist
    monkeypatch.setenv(DATA_ENV, str(other))
    assert resolve_data_dir() == other
    assert resolve_data_dir(str(data)) == data
    with pytest.raises(FileNotFoundError, match=r"'.*nope' \(--data-root\) does not exist"):
        resolve_data_dir(str(tmp_path / "nope"))
    monkeypatch.setenv(DATA_ENV, str(tmp_path / "gone"))
    with pytest.raises(FileNotFoundError, match=r"\$ST_MAGNITUDE_DATA\) does not exist"):
        resolve_data_dir()


def test_datasets_are_found_by_path_or_by_name_and_the_split_is_checked(data, tmp_path, monkeypatch):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resolve_dataset("toy", data) == data / "beir" / "toy"
        assert resolve_dataset(str(data / "beir" / "toy"), None, "train") == data / "beir" / "toy"
        monkeypatch.setenv(DATA_ENV, str(data))
        assert resolve_dataset("toy", split=None) == data / "beir" / "toy"
    with pytest.raises(FileNotFoundError, match=r"no 'dev' split; available: \['test', 'train'\]"):
        resolve_dataset("toy", data, "dev")


def test_a_missing_dataset_is_downloaded_into_the_data_folder(data, monkeypatch):
    from beir import util

    calls = []

    def fake(url, out_dir):
        calls.append(url)
        target = Path(out_dir) / "scifact"
        write_toy_beir(target, n_docs=4, n_queries=1)
        return str(target)

    monkeypatch.setattr(util, "download_and_unzip", fake)
    assert resolve_dataset("scifact", data) == data / "beir" / "scifact"
    assert calls == [data_home.BEIR_URL.format(name="scifact")]
    assert sorted(p.name for p in (data / "beir").iterdir()) == ["scifact", "toy"]  # no temporary folder left
    assert resolve_dataset("scifact", data) == data / "beir" / "scifact" and len(calls) == 1  # once


def test_a_failed_download_names_the_local_datasets_and_the_setting_and_leaves_nothing(data, tmp_path, monkeypatch):
    _offline(monkeypatch)
    with pytest.raises(FileNotFoundError) as err:
        resolve_dataset("fiqa", data)
    msg = str(err.value)
    assert "'fiqa' is not in the data folder" in msg and "Local datasets: toy." in msg and DATA_ENV in msg
    assert sorted(p.name for p in (data / "beir").iterdir()) == ["toy"]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="could not be downloaded"):
        resolve_dataset("fiqa", empty)
    assert list(empty.iterdir()) == []  # the beir/ folder made for the download is removed again
    with pytest.raises(FileNotFoundError, match="could not be downloaded"):
        resolve_dataset("fiqa")  # into the user cache, which did not exist
    assert not (tmp_path / "cache").exists()
    with pytest.raises(FileNotFoundError, match="dataset folder 'no/such' does not exist"):
        resolve_dataset("no/such", data)


def test_an_interrupted_download_leaves_no_partial_dataset(data, monkeypatch):
    from beir import util

    def interrupted(url, out_dir):
        (Path(out_dir) / "scifact").mkdir()
        (Path(out_dir) / "scifact" / "corpus.jsonl").write_text("{")
        raise KeyboardInterrupt

    monkeypatch.setattr(util, "download_and_unzip", interrupted)
    with pytest.raises(KeyboardInterrupt):
        download_beir("scifact", data / "beir")
    assert sorted(p.name for p in (data / "beir").iterdir()) == ["toy"]


def test_every_command_uses_the_one_resolver():
    from st_magnitude.lab.compare import compare
    from st_magnitude.lab.replication import common, runner

    assert compare.resolve_data_dir is resolve_data_dir and compare.resolve_dataset is resolve_dataset
    assert runner.resolve_data_dir is resolve_data_dir and common.SET_DATA is data_home.SET_DATA


def test_no_library_code_guesses_the_development_machines_data_folder():
    root = Path(st_magnitude.__file__).parent
    hits = [
        f"{p.relative_to(root)}:{i}"
        for p in sorted(root.rglob("*.py"))
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"shared/data|[\"']shared[\"']", line)
    ]
    assert hits == []


def test_the_mteb_offline_message_points_at_the_data_setting(data, monkeypatch):
    """A folder of the data setting that holds the dataset is named; one that does not is never offered as if it
    existed (the hint named <data>/beir/scifact whether or not it was there)."""
    pytest.importorskip("mteb")
    from st_magnitude.evaluation.mteb import _offline_message

    monkeypatch.setenv(DATA_ENV, str(data))
    assert f"-t {data / 'beir' / 'toy'}" in _offline_message(["Toy"])
    assert f"{data / 'beir'} (the data folder's beir/, set by $ST_MAGNITUDE_DATA) holds toy" in _offline_message(
        ["SciFact"]
    )
    monkeypatch.setenv(DATA_ENV, str(data / "missing"))
    assert "does not exist" in _offline_message(["SciFact"]) and "$ST_MAGNITUDE_DATA" in _offline_message(["SciFact"])
    monkeypatch.delenv(DATA_ENV)  # the user cache, not made yet
    assert "st_magnitude/data/beir (the data folder's beir/" in _offline_message(["SciFact"])
    assert "does not exist" in _offline_message(["SciFact"])


def test_replicate_reads_the_same_setting_and_says_how_to_set_it(data, tmp_path, monkeypatch):
    from st_magnitude.lab.replication.common import Context, beir_folder

    def ctx(root):
        return Context("cpu", {}, 0, root, "cpu", False, tmp_path)

    monkeypatch.setenv(DATA_ENV, str(data))
    assert beir_folder(ctx(resolve_data_dir()), "toy") == data / "beir" / "toy"
    monkeypatch.delenv(DATA_ENV)
    with pytest.raises(FileNotFoundError, match=r"st_magnitude/data/beir/toy does not exist .*ST_MAGNITUDE_DATA"):
        beir_folder(ctx(resolve_data_dir()), "toy")
