"""Swap two folders in one atomic step, so a path never stops naming a complete folder.

Replacing a folder by renames (``old -> backup``, ``new -> old``) leaves a moment where ``old`` does not exist; a kill
there leaves neither. Linux's ``renameat2(RENAME_EXCHANGE)`` swaps two paths atomically: at every instant ``old``
names either the previous folder or the new one. Where the call is not available (another OS, an old kernel or a
file system without it) :func:`exchange` raises :class:`AtomicSwapUnavailable` and the caller must refuse (or write
elsewhere) instead of falling back to the two renames. Standard library only.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys

__all__ = ["AtomicSwapUnavailable", "exchange"]

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


class AtomicSwapUnavailable(OSError):
    """This platform or file system cannot swap two folders atomically."""


def _renameat2():
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


def exchange(a: str | os.PathLike, b: str | os.PathLike) -> None:
    """Atomically swap the paths ``a`` and ``b`` (both must exist, on one file system)."""
    fn = _renameat2()
    if fn is None:
        raise AtomicSwapUnavailable(errno.ENOSYS, f"no atomic folder swap (renameat2) on {sys.platform}")
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise AtomicSwapUnavailable(code, f"this file system cannot swap folders atomically ({os.strerror(code)})")
        raise OSError(code, os.strerror(code), os.fspath(a), None, os.fspath(b))
