"""Text files read line by line (norm texts, plain corpora): UTF-8 only, each error naming its line."""

from __future__ import annotations

import os
from pathlib import Path

from st_magnitude._trust.errors import InputFileError


def decode_utf8(raw: bytes, file: str | os.PathLike) -> str:
    """``raw`` decoded as UTF-8 (a leading byte-order mark dropped), or :class:`InputFileError` naming the line of
    the first byte that is not UTF-8."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise InputFileError(
            file, f"byte {raw[exc.start]:#04x} is not UTF-8 ({exc.reason}); save the file as UTF-8", where=str(line)
        ) from None
    return text[1:] if text.startswith("\ufeff") else text


def read_lines(path: str | os.PathLike, *, skip_blank: bool = True, max_bytes: int = 1 << 31) -> list[tuple[int, str]]:
    """``(line number, line)`` of a UTF-8 text file, without line ends (blank lines left out unless
    ``skip_blank=False``); :class:`InputFileError` for a missing file, a folder, a file over ``max_bytes`` or bytes
    that are not UTF-8."""
    path = Path(path)
    raw = _read_bytes(path, max_bytes)
    text = decode_utf8(raw, path)
    return [(i, line) for i, line in enumerate(text.splitlines(), 1) if line.strip() or not skip_blank]


def _read_bytes(path: Path, max_bytes: int) -> bytes:
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise InputFileError(path, "is not a file")
        if size > max_bytes:
            raise InputFileError(path, f"is {size:,} bytes, more than the {max_bytes:,} this file may have")
        return path.read_bytes()
    except InputFileError:
        raise
    except OSError as exc:
        raise InputFileError(path, f"cannot be read ({exc.strerror or exc})") from None
