"""DDP end to end: a 2-process ``SentenceTransformerTrainer`` step (gloo, CPU, gathering) equals a 1-process step
on the same 8 pairs, for every parameter — backbone, the learnable γ̂ held by a cached loss, the L2Dir NAP head.
About 90 s (two torchrun launches, four Trainer runs each): marked slow."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "helpers" / "ddp_trainer_check.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_process_trainer_step_equals_one_process(tiny_bert_dir, tmp_path):
    repo = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME", "lo")}
    env["PYTHONPATH"] = os.pathsep.join([repo, env.get("PYTHONPATH", "")])
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    command = [sys.executable, str(SCRIPT), str(tiny_bert_dir), str(one)]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    launch = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1"]
    launch += ["--master_port", str(_free_port()), str(SCRIPT), str(tiny_bert_dir), str(two)]
    proc = subprocess.run(launch, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    single, ddp = json.loads(one.read_text()), json.loads(two.read_text())
    assert (
        set(single)
        == set(ddp)
        == {
            "infonce_learnable_cached",
            "mw_learnable_cached",
            "l2dir",
            "l2dir_cached",
            "infonce_scale_learnable_cached",
            "mw_temperature_learnable",
        }
    )
    for name, params in single.items():
        assert set(params) == set(ddp[name])
        assert any(p.startswith(("similarity_fct.", "nap_head.", "scale.", "temperature.")) for p in params), name
        for param, values in params.items():
            a = torch.tensor(values, dtype=torch.float64)
            b = torch.tensor(ddp[name][param], dtype=torch.float64)
            assert float((a - b).abs().max()) <= 1e-9, (name, param)
