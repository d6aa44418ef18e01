"""Binary arrays carried inside a JSON file as base64 text of zlib-compressed bytes (a result's pooled-AUC pair
counts): unpacked with a bound, so a short string cannot unpack into gigabytes, and to exactly the size the caller
expects."""

from __future__ import annotations

import base64
import binascii
import zlib


def pack_bytes(data: bytes) -> str:
    """``data`` zlib-compressed (level 9) as base64 text."""
    return base64.b64encode(zlib.compress(data, 9)).decode("ascii")


def unpack_bytes(text: object, n_bytes: int) -> bytes:
    """The ``n_bytes`` bytes packed by :func:`pack_bytes`; ``ValueError`` naming what is wrong for text that is not
    base64, not zlib, or unpacks to any other size (reading stops one byte past ``n_bytes``)."""
    if not isinstance(text, str):
        raise ValueError(f"must be base64 text, not {type(text).__name__}")
    try:
        packed = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise ValueError("is not base64 text") from None
    unpacker = zlib.decompressobj()
    try:
        data = unpacker.decompress(packed, n_bytes + 1)
    except zlib.error as exc:
        raise ValueError(f"is not zlib data ({exc})") from None
    if len(data) != n_bytes or unpacker.unconsumed_tail or not unpacker.eof:
        raise ValueError(f"does not unpack to the {n_bytes:,} bytes it must hold")
    return data
