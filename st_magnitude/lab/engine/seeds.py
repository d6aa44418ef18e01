"""Seeds and devices of a lab run: one seeding of Python, NumPy and torch, one device/precision choice."""

from __future__ import annotations

import random

import numpy as np
import torch

__all__ = ["resolve_device", "set_seed"]


def resolve_device(device: str | None = None) -> tuple[str, bool]:
    """``(device, bf16)``: CUDA when available (bf16 when the GPU supports it), else CPU in fp32."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    bf16 = device.startswith("cuda") and torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return device, bf16


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)
