"""Tensors read back from a ``.safetensors`` file the package wrote (a loss's checkpointed state, Revela's LM).

:func:`load_tensors` is ``safetensors.torch.load_file`` behind the boundary: a missing, truncated or corrupt file and
a tensor holding NaN or ±inf are each one :class:`InputFileError` naming the file (and the tensor). A NaN or infinite
value restored into a trainable parameter gives NaN or zero gradients from the first step on (a learnable scale of
``exp(-inf) = 0`` zeroes every logit), so it is refused when read, not found after a wasted run.

safetensors and torch are imported inside the function: the rest of ``st_magnitude._trust`` stays standard library.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from st_magnitude._trust.errors import InputFileError

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["load_tensors"]


def load_tensors(path: str | os.PathLike) -> dict[str, Tensor]:
    """Every tensor in the safetensors file ``path``, on the CPU, by name.

    Raises:
        InputFileError: the file is missing, is not a file, is not a valid safetensors file (truncated, a corrupt
            header), or a floating-point tensor holds NaN or ±inf (the message names the tensor).
    """
    import torch
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_file():
        raise InputFileError(path, "does not exist or is not a file" if not path.exists() else "is not a file")
    try:
        tensors = load_file(str(path))
    except SafetensorError as exc:
        raise InputFileError(path, f"is not a valid safetensors file ({exc}); save it again") from None
    except OSError as exc:
        raise InputFileError(path, f"cannot be read ({exc.strerror or exc})") from None
    for name in sorted(tensors):
        tensor = tensors[name]
        if not (tensor.is_floating_point() or tensor.is_complex()):
            continue
        # float8 has no isfinite kernel on every build: widen the 1-byte floats first
        values = tensor.float() if tensor.is_floating_point() and tensor.element_size() == 1 else tensor
        finite = torch.isfinite(values)
        if not bool(finite.all()):
            n_nan = int(torch.isnan(values).sum())
            n_inf = int((~finite).sum()) - n_nan
            problem = " and ".join(f"{n} {what}" for n, what in ((n_nan, "NaN"), (n_inf, "infinite")) if n)
            raise InputFileError(
                path,
                f"tensor {name!r} holds {problem} value(s) of {tensor.numel()}; training from it gives NaN or zero "
                "gradients. Restore an earlier checkpoint",
            )
    return tensors
