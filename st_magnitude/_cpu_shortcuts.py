"""The CPU's shortcuts, behind one switch.

A few steps take another, equally exact way on the CPU than on an accelerator, because a host read (``bool(t)``,
``.item()``, a ``nonzero``) costs nothing on the CPU while on an accelerator it makes the host wait for the device:

- the losses' batch checks (finiteness, Revela's batch flags) read their flag every call on the CPU, and every
  ``FINITE_CHECK_INTERVAL`` calls elsewhere (``losses/_batch.py``, ``losses/_device_count.py``);
- sim_TN gathers its near-aligned pairs on the CPU and recomputes every pair elsewhere (``similarity.py``);
- MW's grid deposits its moments with ``bincount`` on the CPU and ``index_add_`` elsewhere (``losses/_mw_grid.py``).

:data:`ENABLED` = False makes the CPU take the accelerators' way everywhere: the tests use it to count an
accelerator's host reads per step, and to run the accelerators' code, without one.
"""

from __future__ import annotations

__all__ = ["ENABLED", "takes_cpu_shortcut"]

#: the CPU takes its shortcuts; False runs the accelerators' way on the CPU too
ENABLED = True


def takes_cpu_shortcut(device: object) -> bool:
    """Whether a step on ``device`` (a ``torch.device``, or a tensor) takes the CPU's way."""
    device = getattr(device, "device", device)
    return ENABLED and getattr(device, "type", None) == "cpu"
