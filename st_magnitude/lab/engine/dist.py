"""The few distributed helpers ``st-magnitude compare`` needs under ``torchrun`` / ``accelerate launch``.

A launch is read from the environment the launchers set (``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``); without it
every helper is the single-process no-op, so one code path serves both. Rank 0 does all file writing and
evaluation; the other processes train with it (DDP) and wait at :func:`rank0_decides` / :func:`rank0_only`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: How long the other processes wait for rank 0 (it evaluates every run alone). A failing process ends the launch
#: sooner: torchrun stops the other workers when one exits with an error.
TIMEOUT = timedelta(hours=24)


def world_size() -> int:
    value = os.environ.get("WORLD_SIZE", "1")
    return int(value) if value.isdigit() and int(value) > 0 else 1


def rank() -> int:
    value = os.environ.get("RANK", "0")
    return int(value) if value.isdigit() else 0


def local_rank() -> int:
    value = os.environ.get("LOCAL_RANK", "0")
    return int(value) if value.isdigit() else 0


def is_main() -> bool:
    return rank() == 0


def distributed() -> bool:
    return world_size() > 1


def init(device: str) -> None:
    """Create the process group (gloo on CPU, nccl on CUDA) with a long timeout, once, when launched on N > 1.

    The Trainer (accelerate) reuses an existing group; creating it here first gives the barriers around rank 0's
    evaluation :data:`TIMEOUT` instead of the Trainer's 30-minute default.
    """
    if not distributed():
        return
    import torch.distributed as dist

    if dist.is_initialized():
        return
    backend = "nccl" if device.startswith("cuda") else "gloo"
    if backend == "nccl":  # broadcast_object_list and the barriers use the current device
        import torch

        torch.cuda.set_device(device)
    dist.init_process_group(backend=backend, timeout=TIMEOUT)
    logger.info("process group: %s, rank %d of %d", backend, rank(), world_size())


def broadcast(obj: T) -> T:
    """Rank 0's ``obj`` on every process (pickled)."""
    if not distributed():
        return obj
    import torch.distributed as dist

    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


class Rank0Failed(RuntimeError):
    """Raised on the other processes when rank 0's part failed (rank 0 raises the original error)."""


def rank0_decides(fn: Callable[[], T]) -> T:
    """Run ``fn`` on rank 0 only and hand its result to every process; an error there is raised on every process.

    So a decision taken from files (resume or not, which checkpoint, which datasets to evaluate) is the same on all
    processes, and a refusal on rank 0 (busy folder, changed settings) stops the others cleanly instead of leaving
    them waiting at the next collective.
    """
    if not distributed():
        return fn()
    result: Any = None
    error: BaseException | None = None
    if is_main():
        try:
            result = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised below, after the peers were told
            error = exc
    result, message = broadcast((result, None if error is None else f"{type(error).__name__}: {error}"))
    if error is not None:
        raise error
    if message is not None:
        raise Rank0Failed(f"process 0 stopped the run: {message}")
    return result


def rank0_only(fn: Callable[[], T]) -> T | None:
    """Run ``fn`` on rank 0 (files, evaluation); the others wait for it and get None. Errors as in
    :func:`rank0_decides`, without sending rank 0's (possibly large) result to the others."""
    if not distributed():
        return fn()
    box: list[Any] = []
    rank0_decides(lambda: box.append(fn()))
    return box[0] if box else None


def mean(value):
    """The mean of a tensor over the processes (a detached copy; the value itself on one process)."""
    value = value.detach()
    if not distributed():
        return value
    import torch.distributed as dist

    total = value.clone()
    dist.all_reduce(total)
    return total / world_size()


def main_only(log: Callable[[str], Any]) -> Callable[[str], Any]:
    """``log`` on rank 0, a no-op elsewhere (one copy of every message)."""
    return log if is_main() else (lambda message: None)


def sync_outside_ddp(model, pattern: str) -> list[str]:
    """Keep the parameters of ``model`` whose name matches ``pattern`` out of DDP and average their gradients.

    For parameters that DDP's unused-parameter search cannot handle: used in only some of several forward calls
    before one backward (a role's γ̂: the loss encodes queries and documents in separate calls). A gradient hook
    averages each one over the processes, as DDP would; on one process nothing is done. Returns the names.
    """
    if not distributed():
        return []
    import re

    from torch.nn.parallel import DistributedDataParallel

    matched = [(name, p) for name, p in model.named_parameters() if p.requires_grad and re.search(pattern, name)]
    if not matched:
        return []
    ignored = set(getattr(model, "_ddp_params_and_buffers_to_ignore", ())) | {name for name, _ in matched}
    DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, sorted(ignored))

    for _, p in matched:
        p.register_hook(mean)  # the gradient averaged over the processes, as DDP would
    return [name for name, _ in matched]
