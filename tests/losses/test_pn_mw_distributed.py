"""Two processes with ``gather_across_devices=True`` equal one process on the full batch (loss and gradients of the
model and of the parameters the loss holds), for every loss that gathers; unequal per-process batches raise clearly."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "helpers" / "dist_gather_check.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.heavy  # a 2-process torchrun launch
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
        "infonce_learnable",
        "infonce_dnorm_cached",
        "infonce_learnable_cached",
        "mw_cosine_paper",
        "mw_qnorm_mean",
        "mw_grid_cosine",
        "mw_grid_learnable_cached",
        "mw_learnable_cached",
        "l2dir",
        "l2dir_cached",
        "matryoshka_learnable",
        "infonce_scale_learnable",
        "infonce_scale_learnable_cached",
        "mw_temperature_learnable",
        "mw_temperature_learnable_cached",
        "l2dir_temperature_learnable_cached",
    }
    for name, r in report["results"].items():
        assert r["loss_abs_diff"] <= 1e-6 * max(1.0, abs(r["loss_1proc"])), (name, r)
        assert "model.0.weight" in r["grad_max_abs"], (name, r)
        for param, diff in r["grad_max_abs_diff"].items():
            scale = r["grad_max_abs"][param]
            assert scale > 1e-6, f"{name}: gradient of {param} unexpectedly zero"
            assert diff <= 1e-6 * max(1.0, scale), (name, param, r)
        if "learnable" in name or "l2dir" in name:  # γ̂ / the NAP head: averaged over processes by the loss
            assert r["loss_held"], name
        if "scale_learnable" in name or "temperature_learnable" in name:  # the learnable scale took part
            assert any(p.endswith("log_scale") for p in r["loss_held"]), (name, r)
    # different per-process batch sizes: the package's own error on every process (gloo would abort)
    assert len(report["unequal_sizes"]) == 2
    for message in report["unequal_sizes"]:
        assert "same per-device batch size on every process, got [3, 4]" in message, message
