"""A safetensors file's header, checked before a loader maps the file: a truncated or corrupt weights file is one
line naming it instead of a ``SafetensorError`` traceback from deep inside the loader.

The format (https://github.com/huggingface/safetensors): 8 bytes, the little-endian length N of a JSON header; N
bytes of header, an object of tensor name → ``{"dtype", "shape", "data_offsets": [begin, end]}`` (plus an optional
``__metadata__`` object of strings); then the data, whose offsets count from the end of the header. The check reads
only the header: every tensor's offsets must lie inside the file and its byte length must be the dtype's size times
the product of its shape. Standard library only.
"""

from __future__ import annotations

import math
import os
import struct
from pathlib import Path

from st_magnitude._trust.errors import InputFileError
from st_magnitude._trust.json_files import Fields, _check_tree, _loads
from st_magnitude._trust.text import decode_utf8

__all__ = ["check_safetensors"]

#: bytes per element of each safetensors dtype (sub-byte dtypes are not written by this package's models)
DTYPE_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8, "C64": 8,
}  # fmt: skip
MAX_HEADER = 100_000_000  # the reference implementation's limit


def check_safetensors(path: str | os.PathLike) -> dict[str, list[int]]:
    """Raise :class:`InputFileError` naming ``path`` unless its header is whole and consistent (module docstring);
    return the shape of every tensor it holds, by name."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            prefix = f.read(8)
            if len(prefix) < 8:
                raise InputFileError(path, f"is {size} bytes, too short for a safetensors file (truncated?)")
            (n,) = struct.unpack("<Q", prefix)
            if n > MAX_HEADER or 8 + n > size:
                raise InputFileError(
                    path, f"declares a {n:,}-byte header but holds {size:,} bytes: truncated or not safetensors"
                )
            raw = f.read(n)
    except InputFileError:
        raise
    except OSError as exc:
        raise InputFileError(path, f"cannot be read ({exc.strerror or exc})") from None
    header = _loads(decode_utf8(raw, path), path)
    _check_tree(header, path, None, 8)
    tensors = Fields(header, path, what="the safetensors header")
    data = size - 8 - n
    shapes: dict[str, list[int]] = {}
    for name in tensors.keys():
        if name == "__metadata__":
            continue
        t = tensors.sub(name)
        dtype = t.get("dtype", str, choices=DTYPE_BYTES)
        shape = t.get("shape", list)
        offsets = t.get("data_offsets", list)
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise t.error("shape", f"must list non-negative integers, got {shape!r}")
        if not (len(offsets) == 2 and all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)):
            raise t.error("data_offsets", f"must be two integers [begin, end], got {offsets!r}")
        begin, end = offsets
        if not 0 <= begin <= end <= data:
            raise t.error("data_offsets", f"{offsets} lie outside the file's {data:,} data bytes (a truncated file?)")
        if end - begin != DTYPE_BYTES[dtype] * math.prod(shape):
            raise t.error(
                "data_offsets",
                f"hold {end - begin} bytes, but a {dtype} tensor of shape {shape} needs "
                f"{DTYPE_BYTES[dtype] * math.prod(shape)}",
            )
        shapes[name] = shape
    return shapes
