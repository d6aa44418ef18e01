"""A lock writes only into a file this process made: a hard-linked lock file, a lock file holding something else,
and a stale lock are never written into.

Before, ``OutputLock.acquire`` checked ``O_NOFOLLOW`` and ``S_ISREG`` but not ``st_nlink``, and wrote its record
into the existing inode: ``ln victim.txt out/.lock`` then ``compare ... -o out`` replaced the contents of
``victim.txt`` with the lock record (exit 0); the same for replicate's seed locks, even when replicate then failed.
Now an existing lock file is opened read-only; a hard link (or a file that holds no lock record) is refused in one
line naming it, and a stale lock is taken over by a new file renamed over its name (a new inode).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from st_magnitude._trust import InputFileError
from st_magnitude.cli import main
from st_magnitude.lab.engine.lock import OutputLock

REPO = Path(__file__).resolve().parents[3]
NAMES = [".lock", ".001-cpu-seed1.lock"]  # compare's folder lock, a replicate seed's lock


def _victim(tmp_path: Path, out: Path, name: str) -> Path:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out.mkdir(exist_ok=True)
    os.link(victim, out / name)
    return victim


@pytest.mark.parametrize("name", NAMES)
def test_a_hard_linked_lock_file_is_refused_and_the_other_file_untouched(tmp_path, name):
    out = tmp_path / "out"
    victim = _victim(tmp_path, out, name)
    lock = OutputLock(out, name)
    for attempt in (lock.check_free, lock.acquire):
        with pytest.raises(InputFileError, match="has 2 names") as err:
            attempt()
        assert str(out / name) in str(err.value) and "\n" not in str(err.value)
    assert victim.read_text() == "precious" and os.stat(victim).st_nlink == 2


def test_a_lock_file_holding_something_else_is_refused_and_kept(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / ".lock").write_text("the user's own notes")
    with pytest.raises(InputFileError, match="holds no lock record"):
        OutputLock(out).acquire()
    assert (out / ".lock").read_text() == "the user's own notes"


def _killed_holder(out: Path) -> int:
    """The pid of a process that held ``out/.lock`` and was killed (its record stays)."""
    code = (
        "import sys, time; from st_magnitude.lab.engine.lock import OutputLock; "
        f"OutputLock({str(out)!r}).acquire(); print('locked', flush=True); time.sleep(120)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert proc.stdout.readline().strip() == "locked"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    return proc.pid


def test_a_stale_lock_is_taken_over_by_a_new_file_never_written_into(tmp_path):
    out = tmp_path / "out"
    pid = _killed_holder(out)
    old = os.open(out / ".lock", os.O_RDONLY)  # the stale file's inode, kept open to read it afterwards
    try:
        before = os.pread(old, 4096, 0)
        with OutputLock(out) as lock:
            assert lock.took_over["pid"] == pid
            assert os.stat(out / ".lock").st_ino != os.fstat(old).st_ino  # a new file under the old name
            assert json.loads((out / ".lock").read_text())["pid"] == os.getpid()
        assert os.pread(old, 4096, 0) == before  # the old inode was never written
    finally:
        os.close(old)
    assert sorted(os.listdir(out)) == []  # released: the lock and no temporary file left


def test_an_empty_lock_file_left_between_create_and_write_is_taken_over(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / ".lock").write_bytes(b"")
    with OutputLock(out):
        assert json.loads((out / ".lock").read_text())["pid"] == os.getpid()


def test_release_removes_only_the_file_this_process_wrote(tmp_path):
    out = tmp_path / "out"
    lock = OutputLock(out).acquire()
    (tmp_path / "x").write_text("other")
    os.replace(tmp_path / "x", out / ".lock")  # someone replaced the lock file meanwhile
    lock.release()
    assert (out / ".lock").read_text() == "other"


def test_compare_into_a_folder_with_a_hard_linked_lock_is_one_line_and_the_victim_unchanged(
    tiny_bert_dir, tmp_path, capsys
):
    from conftest import build_tiny_st
    from helpers.toy_beir import write_toy_beir

    build_tiny_st(tiny_bert_dir).save(str(tmp_path / "model"))
    toy = write_toy_beir(tmp_path / "toy", n_docs=12, n_queries=4)
    write_toy_beir(toy, n_docs=12, n_queries=4, split="train")
    out = tmp_path / "out"
    victim = _victim(tmp_path, out, ".lock")
    argv = ["compare", "--model", str(tmp_path / "model"), "--train-data", str(toy), "--eval-data", str(toy)]
    argv += ["--data-root", str(tmp_path), "-o", str(out)]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{out / '.lock'}: has 2 names" in err[0], err
    assert victim.read_text() == "precious"
    assert sorted(p.name for p in out.iterdir()) == [".lock"]
