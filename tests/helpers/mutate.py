"""Byte mutations for the property tests of the file readers (hypothesis draws the operations)."""

from __future__ import annotations


def mutate_bytes(raw: bytes, ops: list[tuple[str, float, int]]) -> bytes:
    """``raw`` after each ``(op, where, byte)``: ``set`` / ``flip`` (one bit of) / ``insert`` / ``delete`` the byte at
    the fraction ``where`` of the length, or ``truncate`` there."""
    data = bytearray(raw)
    for op, where, byte in ops:
        i = min(int(where * len(data)), max(len(data) - 1, 0))
        if op == "set" and data:
            data[i] = byte
        elif op == "flip" and data:
            data[i] ^= 1 << (byte % 8)
        elif op == "insert":
            data[i:i] = bytes([byte])
        elif op == "delete" and data:
            del data[i]
        elif op == "truncate":
            del data[i:]
    return bytes(data)
