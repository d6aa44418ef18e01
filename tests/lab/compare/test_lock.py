"""One `st-magnitude compare` per output folder: a live holder is named, a dead one is replaced."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.toy_beir import write_toy_beir
from helpers.toy_compare import toy_compare_config

from st_magnitude.lab.compare.compare import run_compare
from st_magnitude.lab.engine.lock import FolderLocked, OutputLock, pid_alive

REPO = Path(__file__).resolve().parents[3]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(proc.stdout)
    assert not pid_alive(pid)
    return pid


def test_a_second_holder_is_refused_with_the_first_named(tmp_path):
    out = tmp_path / "out"
    with OutputLock(out):
        record = json.loads((out / ".lock").read_text())
        assert record["pid"] == os.getpid() and record["host"] == socket.gethostname()
        with pytest.raises(
            FolderLocked, match=rf"in use by pid {os.getpid()} on host {socket.gethostname()}, started"
        ):
            OutputLock(out).acquire()
        with pytest.raises(FolderLocked):
            OutputLock(out).check_free()
    assert not (out / ".lock").exists()
    with OutputLock(out) as again:  # released: free for the next run
        assert again.took_over is None


def test_a_stale_lock_file_is_taken_over(tmp_path, caplog):
    out = tmp_path / "out"
    out.mkdir()
    stale = {"pid": dead_pid(), "host": socket.gethostname(), "started": time.time() - 60}
    (out / ".lock").write_text(json.dumps(stale))
    OutputLock(out).check_free()  # does not refuse
    with OutputLock(out) as lock:
        assert lock.took_over == stale
        assert json.loads((out / ".lock").read_text())["pid"] == os.getpid()
    assert f"left by pid {stale['pid']}" in caplog.text


@pytest.fixture
def setup(tmp_path, tiny_model):
    tiny_model.save(str(tmp_path / "base"))
    write_toy_beir(tmp_path / "beir" / "toy", n_docs=16, n_queries=4, split="test")
    write_toy_beir(tmp_path / "beir" / "toy", n_docs=16, n_queries=4, split="train", seed=1)
    return tmp_path / "base", tmp_path  # the data folder: datasets under beir/


def test_compare_refuses_a_busy_folder_and_takes_over_after_its_holder_was_killed(setup, tmp_path):
    model_dir, data = setup
    out = tmp_path / "out"
    argv = [
        "compare",
        *("--model", str(model_dir), "--variants", "dot", "--train-data", "toy", "--eval-data", "toy"),
        *("--data-root", str(data), "--output", str(out), "--steps", "2", "--batch-size", "4"),
        *("--max-seq-length", "32", "--no-kappa"),
    ]
    cli = [sys.executable, "-m", "st_magnitude.cli", *argv]

    # another process holds the folder: the run stops at once, names it, and writes nothing
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            # lock.py needs only the standard library: load it alone, so the holder starts in a blink
            "import importlib.util as u, time; "
            f"s = u.spec_from_file_location('lock', {str(REPO / 'st_magnitude/lab/engine/lock.py')!r}); "
            "m = u.module_from_spec(s); s.loader.exec_module(m); "
            f"m.OutputLock({str(out)!r}).acquire(); print('locked', flush=True); time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        proc = subprocess.run(cli, capture_output=True, text=True, env=ENV, timeout=300)
        assert proc.returncode == 2
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in proc.stderr
        assert f"in use by pid {holder.pid} on host {socket.gethostname()}, started " in lines[0]
        assert sorted(p.name for p in out.iterdir()) == [".lock"]
    finally:
        holder.send_signal(signal.SIGKILL)  # a killed run leaves its lock file behind
        holder.wait()
    assert json.loads((out / ".lock").read_text())["pid"] == holder.pid

    logs: list[str] = []
    config = toy_compare_config(model_dir, data, out, kappa=False)
    run_compare(config, log=logs.append)
    assert any(f"took over a stale lock left by pid {holder.pid}" in line for line in logs)
    assert (out / "runs" / "dot-infonce" / "metrics.json").exists() and not (out / ".lock").exists()


def test_only_the_first_process_of_a_distributed_launch_locks(tmp_path, monkeypatch):
    from st_magnitude.lab.compare.compare import _output_lock

    monkeypatch.setenv("RANK", "0")
    assert isinstance(_output_lock(tmp_path), OutputLock)
    monkeypatch.setenv("RANK", "1")  # torchrun's other ranks run the same command in the same folder
    assert _output_lock(tmp_path) is None
