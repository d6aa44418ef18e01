"""Two processes with ``gather_across_devices=True`` equal one process on the full batch (loss and gradients)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("dist_gather_check.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_process_gather_equals_full_batch(tmp_path):
    pytest.importorskip("torch.distributed")
    out = tmp_path / "report.json"
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "MASTER_ADDR": "127.0.0.1",
        "GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME", "lo"),
    }
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(_free_port()),
        str(SCRIPT),
        str(out),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["world"] == 2
    assert set(report["results"]) == {
        "infonce_qnorm",
        "infonce_dnorm_cached",
        "mw_cosine_paper",
        "mw_qnorm_mean",
        "mw_cosine_cached",
    }
    for name, r in report["results"].items():
        assert r["grad_max_abs"] > 1e-3, f"{name}: gradient unexpectedly zero"
        assert r["loss_abs_diff"] <= 1e-6 * max(1.0, abs(r["loss_1proc"])), (name, r)
        assert r["grad_max_abs_diff"] <= 1e-6 * max(1.0, r["grad_max_abs"]), (name, r)
