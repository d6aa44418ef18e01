"""One writer per output folder: a lock file that names its holder and is taken over when its holder died.

``OUT/.lock`` holds ``{"pid", "host", "started"}`` of the process working in ``OUT``. Where the platform has
``fcntl`` the file is also ``flock``-ed for the life of the process, so the kernel releases it when the holder dies
however it died (SIGKILL included), and two processes racing for a stale lock cannot both win. Where it has not, the
holder's pid is checked instead (same host only). A second process refuses at once with a message naming the holder;
a lock whose holder is gone is taken over with a warning.

The lock file is opened without following a symlink (``O_NOFOLLOW``), created only when it is missing
(``O_CREAT | O_EXCL``), and must then be a regular file (checked on the open descriptor; ``O_NONBLOCK`` so a FIFO
cannot hang the open): a symlink, a dangling symlink, a FIFO, a socket or a folder planted under its name is
refused in one line naming it (:class:`~st_magnitude._trust.InputFileError`), and nothing is written through it.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import socket
import stat
import time
from pathlib import Path
from typing import Any

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows: pid check only
    fcntl = None

from st_magnitude._trust import InputFileError, read_json

logger = logging.getLogger(__name__)

__all__ = ["FolderLocked", "OutputLock", "pid_alive"]

LOCK_NAME = ".lock"


class FolderLocked(FileExistsError):
    """Another live process works in this folder."""


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists on this host (a zombie counts as gone)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except OSError:  # pragma: no cover - e.g. Windows without the pid
        return False
    try:  # a killed child its parent has not reaped yet is not alive
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True


#: How :func:`_open_lock_file` opens: read-write, not through a symlink, never blocking (a FIFO), not inherited.
_OPEN_FLAGS = os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def _kind(mode: int) -> str:
    """What a file of this ``st_mode`` is, for the refusal."""
    for test, name in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _not_a_lock(path: Path, advice: str, mode: int | None = None, exc: OSError | None = None) -> InputFileError:
    if mode is None:
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            mode = None
    what = _kind(mode) if mode is not None else f"unusable ({exc.strerror if exc else 'cannot be opened'})"
    return InputFileError(
        path,
        f"is {what}, not a regular file: a lock file is a plain file this package writes. Nothing was written "
        f"through it; remove it, or {advice}",
    )


def _open_lock_file(path: Path, advice: str, *, create: bool) -> int | None:
    """A descriptor of the regular file ``path`` (created when missing and ``create``), or None when it is missing
    and not ``create``; :class:`InputFileError` naming it when it is anything else."""
    for _ in range(20):  # retries only while another process creates or removes the file under us
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except FileNotFoundError:
            if not create:
                return None
            try:
                fd = os.open(path, _OPEN_FLAGS | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                continue  # made meanwhile: open what is there now, as it is
            except OSError as exc:
                raise _not_a_lock(path, advice, exc=exc) from None
        except OSError as exc:  # ELOOP: a symlink (dangling too); ENXIO: a socket; EISDIR: a folder
            if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise
            raise _not_a_lock(path, advice, exc=exc) from None
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise _not_a_lock(path, advice, mode)
        return fd
    raise FolderLocked(f"could not open {path}: it keeps being created and removed by another process")


def _describe(info: dict[str, Any]) -> str:
    started = info.get("started")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)) if isinstance(started, (int, float)) else "?"
    return f"pid {info.get('pid', '?')} on host {info.get('host', '?')}, started {when}"


class OutputLock:
    """``with OutputLock(folder): ...`` — hold ``folder/.lock`` or raise :class:`FolderLocked` naming the holder.

    ``name``: another lock file in ``folder`` (several locks in one folder, e.g. one per seed of a run); ``what``
    and ``advice`` word the refusal (``"<what> is in use by <holder>; wait for it to finish, stop it, or <advice>"``).
    """

    def __init__(
        self,
        folder: str | os.PathLike[str],
        name: str = LOCK_NAME,
        *,
        what: str | None = None,
        advice: str = "choose another --output folder",
    ):
        self.folder = Path(folder)
        self.path = self.folder / name
        self.what = what or str(self.folder)
        self.advice = advice
        self._fd: int | None = None
        self.took_over: dict[str, Any] | None = None  # the stale holder's record, when we replaced one

    # -- reading --------------------------------------------------------------------------------------------------
    def holder(self) -> dict[str, Any] | None:
        """The holder's record (pid, host, start time), or None when there is none or it is unreadable."""
        try:
            if not stat.S_ISREG(os.lstat(self.path).st_mode):
                return None  # never read through a symlink, never open a FIFO
            info = read_json(self.path)
        except (OSError, InputFileError):  # missing, empty (being written) or not a lock record
            return None
        return info if isinstance(info, dict) else None

    def _refuse(self, info: dict[str, Any] | None) -> FolderLocked:
        who = _describe(info) if info else "another process (its lock record is unreadable)"
        return FolderLocked(
            f"{self.what} is in use by {who}; wait for it to finish, stop it, or {self.advice} "
            f"(lock file: {self.path})"
        )

    def _held_by_live_process(self, info: dict[str, Any] | None) -> bool:
        if not info or not isinstance(info.get("pid"), int):
            return False
        if info.get("host") != socket.gethostname():
            return True  # cannot tell: a process on another machine may hold it
        return pid_alive(info["pid"])

    # -- acquiring ------------------------------------------------------------------------------------------------
    def _flock_or_refuse(self, fd: int) -> None:
        """Take the exclusive lock on ``fd`` without waiting, or raise :class:`FolderLocked` naming the holder."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise self._refuse(self.holder()) from None

    def check_free(self) -> None:
        """Raise :class:`FolderLocked` now if a live process holds the folder (call before slow preparation)."""
        try:
            fd = _open_lock_file(self.path, self.advice, create=False)
        except FileNotFoundError:
            return  # no folder: free
        if fd is None:
            return  # no lock file: free
        try:
            if fcntl is not None:
                self._flock_or_refuse(fd)
                fcntl.flock(fd, fcntl.LOCK_UN)
            elif self._held_by_live_process(self.holder()):
                raise self._refuse(self.holder())
        finally:
            os.close(fd)

    def acquire(self) -> OutputLock:
        if self._fd is not None:
            raise RuntimeError("lock already held by this object")
        self.folder.mkdir(parents=True, exist_ok=True)
        for _ in range(20):  # retries only when the file was replaced under us
            fd = _open_lock_file(self.path, self.advice, create=True)
            try:
                if fcntl is not None:
                    self._flock_or_refuse(fd)
                    # the holder may have removed the file between our open and flock: lock the file on disk
                    try:
                        same = os.fstat(fd).st_ino == os.lstat(self.path).st_ino
                    except FileNotFoundError:
                        same = False
                    if not same:
                        os.close(fd)
                        continue
                info = self.holder()
                if info and info.get("pid") != os.getpid():
                    # with flock a free lock means its holder is gone (the kernel released it); without, ask the pid
                    if fcntl is None and self._held_by_live_process(info):
                        raise self._refuse(info)
                    self.took_over = info
                    logger.warning(
                        "taking over the stale lock of %s left by %s (no longer running)", self.folder, _describe(info)
                    )
                record = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
                os.ftruncate(fd, 0)
                os.pwrite(fd, json.dumps(record).encode("utf-8"), 0)
                os.fsync(fd)
                self._fd = fd
                return self
            except BaseException:
                if self._fd is None:
                    os.close(fd)
                raise
        raise FolderLocked(f"could not lock {self.path}: it keeps being replaced by another process")

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            # remove the file while still holding the lock, so nobody can lock the old inode after we let go
            if self.holder() and self.holder().get("pid") == os.getpid():
                self.path.unlink(missing_ok=True)
        finally:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> OutputLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
