"""Count, on the CPU, the reads of tensor values into Python that st_magnitude's own code makes.

On an accelerator each such read (``.item()``, ``float(t)``, ``bool(t)``, ``if t:``, ``.tolist()``, ``.cpu()``, a
``torch.unique`` or ``nonzero`` whose output size depends on the values, a boolean-mask index) waits for the
device: a host sync. On the CPU they cost nothing, so :func:`counting_host_reads` trips the Python entry points of
those operations with a counting wrapper instead. A read is counted when the nearest caller outside torch is a
file of the ``st_magnitude`` package (the model's and sentence-transformers' own reads are theirs, not ours), and
recorded as ``"path.py:line"`` of that caller.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

import torch

import st_magnitude

PACKAGE = str(Path(st_magnitude.__file__).resolve().parent)
TORCH = str(Path(torch.__file__).resolve().parent)
HERE = str(Path(__file__).resolve())

#: ``torch.Tensor`` methods whose result is a Python value read from the tensor's data (or a host copy of it)
TENSOR_READS = ("item", "__bool__", "__float__", "__int__", "__index__", "__complex__", "tolist", "numpy", "cpu")
#: operations whose output size depends on the values: the device must be waited for before they return
SIZE_FROM_VALUES = ("unique", "nonzero", "masked_select", "unique_consecutive", "argwhere")


def _caller() -> str | None:
    """``"path:line"`` of the nearest frame outside torch and this file, when it lies in st_magnitude; else None."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if name != HERE and not name.startswith(TORCH):
            if name.startswith(PACKAGE):
                return f"{Path(name).relative_to(Path(PACKAGE).parent)}:{frame.f_lineno}"
            return None
        frame = frame.f_back
    return None


def _bool_mask(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items)


@contextlib.contextmanager
def counting_host_reads() -> Iterator[list[str]]:
    """A list that receives the call site of every host read st_magnitude's code makes inside the block."""
    sites: list[str] = []
    saved: list[tuple[object, str, object | None]] = []

    def wrap(owner, name: str, is_read=None) -> None:
        original = getattr(owner, name)
        own = name in vars(owner)

        def counted(*args, **kwargs):
            if is_read is None or is_read(args):
                site = _caller()
                if site is not None:
                    sites.append(site)
            return original(*args, **kwargs)

        saved.append((owner, name, original if own else None))
        setattr(owner, name, counted)

    try:
        for name in TENSOR_READS:
            wrap(torch.Tensor, name)
        for name in SIZE_FROM_VALUES:
            wrap(torch.Tensor, name)
            if hasattr(torch, name):
                wrap(torch, name)
        wrap(torch.Tensor, "__getitem__", lambda args: _bool_mask(args[1]))
        wrap(torch.Tensor, "__setitem__", lambda args: _bool_mask(args[1]))
        yield sites
    finally:
        for owner, name, original in reversed(saved):
            if original is None:
                delattr(owner, name)  # it was inherited (torch._C.TensorBase): inherit it again
            else:
                setattr(owner, name, original)
