"""Writing result files so a reader never sees half of one (standard library only)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_json_atomic(path: str | os.PathLike, obj: Any, indent: int = 2) -> None:
    """Write ``obj`` as JSON to ``path`` through a temporary file in the same folder and one rename.

    An interrupted write leaves the previous file (or none), never a truncated one; the temporary file is removed on
    failure. Parent folders are created; numpy scalars are written as floats.
    """
    target = Path(path).absolute()
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=indent, default=float)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
