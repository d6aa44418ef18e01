"""What a lab run cost, measured: CPU-seconds of the process and its finished children, wall time, load average,
and the machine it ran on (recorded with every replication seed and summed over resumed processes)."""

from __future__ import annotations

import os
import platform
import resource
import socket
import time
from typing import Any

__all__ = ["COST_KEYS", "Meter", "machine_info", "with_earlier_processes"]


def machine_info(device: str) -> dict[str, Any]:
    import torch

    info = {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": device,
    }
    try:
        import sentence_transformers
        import transformers

        info["sentence_transformers"] = sentence_transformers.__version__
        info["transformers"] = transformers.__version__
    except ImportError:  # pragma: no cover
        pass
    if device.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def _cpu_seconds() -> tuple[float, float]:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover - platforms without a load average
        return None


class Meter:
    """CPU-seconds (this process + finished children), wall seconds and load average since construction."""

    def __init__(self) -> None:
        self._wall, self._cpu, self._load = time.perf_counter(), _cpu_seconds(), _load()

    def read(self) -> dict[str, Any]:
        own, kids = _cpu_seconds()
        own, kids = own - self._cpu[0], kids - self._cpu[1]
        return {
            "cpu_seconds": round(own + kids, 2),
            "cpu_seconds_process": round(own, 2),
            "cpu_seconds_children": round(kids, 2),
            "wall_seconds": round(time.perf_counter() - self._wall, 2),
            "load_average_start": self._load,
            "load_average_end": _load(),
        }


#: the summed fields of a run's recorded cost
COST_KEYS = ("cpu_seconds", "cpu_seconds_process", "cpu_seconds_children", "wall_seconds")


def with_earlier_processes(resources: dict[str, Any], earlier: list[dict[str, Any] | None] | None) -> dict[str, Any]:
    """A run's whole cost: this process's ``resources`` plus those of the killed processes it resumed (``earlier``,
    each up to its last finished seed), so a resumed run reports what all its seeds cost, not only the last part."""
    total = dict(resources)
    for before in earlier or []:
        for k in COST_KEYS:
            if before and before.get(k) is not None and total.get(k) is not None:
                total[k] = round(total[k] + before[k], 2)
    if earlier:
        total["processes"] = 1 + len(earlier)
        if earlier[0] and earlier[0].get("load_average_start") is not None:
            total["load_average_start"] = earlier[0]["load_average_start"]  # the load when the run began
    return total
