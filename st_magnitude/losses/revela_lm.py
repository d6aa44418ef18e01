"""Revela's LM exported on request: its trainable weights (the LoRA adapters) saved and loaded in place.

Training checkpoints hold them through :class:`st_magnitude.callbacks.LossStateCallback`.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import torch
from torch import Tensor, nn

from st_magnitude._trust.errors import InputFileError
from st_magnitude._trust.tensors import load_tensors
from st_magnitude.modules.revela_attention import REVELA_ATTENTION

logger = logging.getLogger(__name__)

__all__ = ["load_lm_weights", "save_lm_weights"]


_LM_WEIGHTS = "trainable.safetensors"
_LM_META = "revela_lm.json"


def _trainable_state(lm: nn.Module) -> dict[str, Tensor]:
    params = {name: p.detach().contiguous().cpu() for name, p in lm.named_parameters() if p.requires_grad}
    if not params:  # a frozen LM: nothing changes, save nothing but still write the metadata
        return {}
    return params


def save_lm_weights(lm: nn.Module, folder: str | os.PathLike) -> Path:
    """Save the LM's trainable parameters (full weights, or the LoRA adapters of a ``peft`` model) as safetensors.

    Tied parameters (e.g. Llama's embedding/LM-head) are stored once (``named_parameters`` deduplicates them).
    """
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = _trainable_state(lm)
    save_file(state, str(folder / _LM_WEIGHTS))
    meta = {"n_tensors": len(state), "names": sorted(state), "attn_implementation": REVELA_ATTENTION}
    (folder / _LM_META).write_text(json.dumps(meta, indent=1))
    return folder


def load_lm_weights(lm: nn.Module, folder: str | os.PathLike) -> None:
    """Load what :func:`save_lm_weights` wrote into ``lm`` in place (optimizer references stay valid).

    Raises:
        FileNotFoundError: if the folder holds no saved LM.
        InputFileError: (a ``ValueError``) the file is not a valid safetensors file, a tensor holds NaN or ±inf, or
            a saved tensor has no parameter of that name and shape in ``lm``; the message names the file.
    """
    path = Path(folder) / _LM_WEIGHTS
    if not path.is_file():
        raise FileNotFoundError(f"no saved Revela LM at {path}")
    saved = load_tensors(path)
    params = dict(lm.named_parameters())
    missing = [name for name in saved if name not in params or params[name].shape != saved[name].shape]
    if missing:
        raise InputFileError(path, f"saved LM tensors do not match the LM's parameters: {missing[:5]}")
    with torch.no_grad():
        for name, tensor in saved.items():
            params[name].copy_(tensor.to(device=params[name].device, dtype=params[name].dtype))
