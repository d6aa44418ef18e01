"""A lock file planted in the output folder (a symlink, a dangling symlink, a FIFO, a folder) is refused in one
line naming it; the lock never writes through it.

Before, ``OutputLock.acquire`` opened ``OUT/.lock`` (compare) and ``OUT/.<run>-seed<k>.lock`` (replicate) with
``O_RDWR | O_CREAT``, following a symlink: it truncated the file the link named and wrote its record there, or
created the file a dangling link named; a FIFO gave ``OSError: [Errno 22]`` naming nothing.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from st_magnitude._trust import InputFileError
from st_magnitude.cli import main
from st_magnitude.lab.engine.lock import OutputLock

NAMES = [".lock", ".001-cpu-seed1.lock"]  # compare's folder lock, a replicate seed's lock


@pytest.fixture(autouse=True)
def _no_hang():
    """A lock that blocks on a FIFO fails the test instead of hanging the suite."""
    signal.signal(signal.SIGALRM, lambda *a: pytest.fail("the lock hung on the planted file"))
    signal.alarm(10)
    yield
    signal.alarm(0)


def _refused(out: Path, name: str, what: str) -> None:
    lock = OutputLock(out, name)
    with pytest.raises(InputFileError, match=rf"{name}: is {what}, not a regular file"):
        lock.check_free()
    with pytest.raises(InputFileError, match=rf"{name}: is {what}, not a regular file") as err:
        lock.acquire()
    assert str(out / name) in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("name", NAMES)
def test_a_symlinked_lock_file_is_refused_and_its_target_untouched(tmp_path, name):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    (out / name).symlink_to(victim)
    _refused(out, name, "a symbolic link")
    assert victim.read_text() == "precious"


@pytest.mark.parametrize("name", NAMES)
def test_a_dangling_lock_symlink_creates_nothing(tmp_path, name):
    out = tmp_path / "out"
    out.mkdir()
    (out / name).symlink_to(tmp_path / "planted.txt")
    _refused(out, name, "a symbolic link")
    assert not (tmp_path / "planted.txt").exists()


@pytest.mark.parametrize("name", NAMES)
def test_a_fifo_lock_file_is_refused_at_once(tmp_path, name):
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / name)
    _refused(out, name, "a FIFO")


def test_a_folder_named_like_the_lock_is_refused(tmp_path):
    out = tmp_path / "out"
    (out / ".lock").mkdir(parents=True)
    _refused(out, ".lock", "a folder")


def test_compare_into_a_folder_with_a_planted_lock_is_one_line_before_any_work(tiny_bert_dir, tmp_path, capsys):
    from conftest import build_tiny_st
    from helpers.toy_beir import write_toy_beir

    build_tiny_st(tiny_bert_dir).save(str(tmp_path / "model"))

    toy = write_toy_beir(tmp_path / "toy", n_docs=12, n_queries=4)
    write_toy_beir(toy, n_docs=12, n_queries=4, split="train")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    (out / ".lock").symlink_to(victim)
    argv = ["compare", "--model", str(tmp_path / "model"), "--train-data", str(toy), "--eval-data", str(toy)]
    argv += ["--data-root", str(tmp_path), "-o", str(out)]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{out / '.lock'}: is a symbolic link" in err[0], err
    assert victim.read_text() == "precious"
    assert sorted(p.name for p in out.iterdir()) == [".lock"]
