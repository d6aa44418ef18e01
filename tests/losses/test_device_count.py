"""DeviceCount: a per-call flag counted on the device, read on the first calls and every interval (or every call)."""

from __future__ import annotations

import torch

from st_magnitude import _cpu_shortcuts
from st_magnitude.losses import _batch
from st_magnitude.losses._device_count import DeviceCount


def test_a_cpu_flag_is_read_every_call_by_default():
    count = DeviceCount()
    assert [count.add(torch.tensor(f)) for f in (False, True, True)] == [0, 1, 1]
    assert count.span == 1


def test_an_accelerator_flag_is_read_on_the_first_calls_then_every_interval(monkeypatch):
    monkeypatch.setattr(_cpu_shortcuts, "ENABLED", False)  # the CPU counted as an accelerator is
    monkeypatch.setattr(_batch, "DUPLICATE_CHECK_FIRST", 2)
    monkeypatch.setattr(_batch, "FINITE_CHECK_INTERVAL", 3)
    count = DeviceCount()
    flags = [True, False, True, True, False, True, False, False, False]
    got = []
    for flag in flags:
        got.append(count.add(torch.tensor(flag)))
        if got[-1] is None:
            assert count.peek() == sum(flags[: len(got)]) - sum(g or 0 for g in got)  # pending, not consumed
    # calls 1 and 2 (the first calls), 3, 6 and 9 (the interval) read; the others count on the device
    assert got == [1, 0, 1, None, None, 2, None, None, 0]
    assert count.span == 3 and count.peek() == 0
