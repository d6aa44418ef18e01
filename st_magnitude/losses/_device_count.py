"""A per-call condition counted on the device and read into Python only now and then (each read is a host sync).

A loss that checks its batch every call (``if bool(flag): raise``) makes the host wait for the accelerator every
step. :class:`DeviceCount` adds each call's 0-d flag to a count kept on the flag's device and reads the count on the
calls where it pays: on the first :data:`~st_magnitude.losses._batch.DUPLICATE_CHECK_FIRST` calls (a misconfigured
sampler or collator shows on the first batch, reported at that batch), then every
:data:`~st_magnitude.losses._batch.FINITE_CHECK_INTERVAL` calls, as the finiteness check does. A flag on the CPU is
read every call (nothing to wait for; :mod:`st_magnitude._cpu_shortcuts`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from st_magnitude._cpu_shortcuts import takes_cpu_shortcut
from st_magnitude.losses import _batch

__all__ = ["DeviceCount"]


class DeviceCount:
    """How many calls raised their flag, counted on the device; :meth:`add` returns the count when it reads it."""

    def __init__(self) -> None:
        self._pending: Tensor | None = None
        self._calls = 0
        self._since_read = 0
        #: how many calls the count returned by the latest read covers (1 when it was read every call)
        self.span = 0

    def add(self, flag: Tensor) -> int | None:
        """Count ``flag`` (a 0-d bool tensor); return the flags raised since the last read when this call reads
        them (one host read), else None (nothing read)."""
        self._calls += 1
        self._since_read += 1
        flag = flag.detach().to(torch.long)
        self._pending = flag if self._pending is None else self._pending + flag
        if not self._reads_now(flag.device):
            return None
        count = int(self._pending)  # the host read
        self._pending, self.span, self._since_read = None, self._since_read, 0
        return count

    def peek(self) -> int:
        """The flags raised since the last read, read now (one host read when any are pending); the count stays."""
        return 0 if self._pending is None else int(self._pending)

    def _reads_now(self, device: torch.device) -> bool:
        if takes_cpu_shortcut(device):
            return True
        return self._calls <= _batch.DUPLICATE_CHECK_FIRST or self._calls % _batch.FINITE_CHECK_INTERVAL == 0
