"""Gzip'd JSON files (a result's per-item values): read with the checks of :func:`read_json` and a bound on the
unpacked size (a small file cannot unpack into gigabytes); written atomically and byte-for-byte reproducibly (no
time stamp in the gzip header)."""

from __future__ import annotations

import gzip
import io
import json
import os
import tempfile
import zlib
from pathlib import Path
from typing import Any

from st_magnitude._trust.errors import InputFileError
from st_magnitude._trust.json_files import _check_tree, _loads
from st_magnitude._trust.text import _read_bytes, decode_utf8


def read_json_gz(
    path: str | os.PathLike, *, max_bytes: int = 1 << 26, max_unpacked: int = 1 << 28, max_depth: int = 64
) -> Any:
    """The JSON value in the gzip file ``path``; :class:`InputFileError` for a file that is not gzip, unpacks to
    more than ``max_unpacked`` bytes, or fails :func:`~st_magnitude._trust.json_files.read_json`'s checks."""
    path = Path(path)
    raw = _read_bytes(path, max_bytes)
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as f:
            data = f.read(max_unpacked + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise InputFileError(path, f"is not a readable gzip file ({exc})") from None
    if len(data) > max_unpacked:
        raise InputFileError(path, f"unpacks to more than the {max_unpacked:,} bytes this file may have")
    value = _loads(decode_utf8(data, path), path)
    _check_tree(value, path, None, max_depth)
    return value


def write_json_gz_atomic(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as compact JSON, gzip'd with no time stamp, through a temporary file and one rename."""
    target = Path(path).absolute()
    target.parent.mkdir(parents=True, exist_ok=True)
    packed = gzip.compress(json.dumps(obj, separators=(",", ":"), default=float).encode("utf-8"), 9, mtime=0)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(packed)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
