"""Large line-oriented files (BEIR ``corpus.jsonl``, ``queries.jsonl``, qrels TSV) streamed one line at a time.

:func:`~st_magnitude._trust.text.read_lines` holds the whole text and splits it with ``str.splitlines``, which also
breaks at U+2028, U+0085 and the other Unicode line separators a JSON string may hold; a corpus of several GB is read
here instead, line by line at ``\\n`` only (so ``\\r\\n`` files keep their ``\\r``, as csv expects), each line decoded
as UTF-8 on its own so an error names its line, and the memory held is one line.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from st_magnitude._trust.errors import InputFileError

__all__ = ["iter_lines"]


def iter_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of every line of the UTF-8 file ``path``, the line end kept, a byte order mark at the
    start of the file dropped.

    Raises:
        InputFileError: the file cannot be opened or read, is not a file, or a line is not UTF-8 (naming the line and
            the byte).
    """
    path = Path(path)
    try:
        if not path.is_file():
            raise InputFileError(path, "does not exist or is not a file" if not path.exists() else "is not a file")
        with open(path, "rb") as f:
            for lineno, raw in enumerate(f, start=1):
                yield lineno, _decode(raw, path, lineno)
    except InputFileError:
        raise
    except OSError as exc:
        raise InputFileError(path, f"cannot be read ({exc.strerror or exc})") from None


def _decode(raw: bytes, path: Path, lineno: int) -> str:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFileError(
            path,
            f"byte {raw[exc.start]:#04x} (byte {exc.start + 1} of the line) is not UTF-8 ({exc.reason}); save the "
            "file as UTF-8",
            where=str(lineno),
        ) from None
    return text.removeprefix("\ufeff") if lineno == 1 else text  # a BOM is no part of the first id
