"""One writer per output folder: a lock file that names its holder and is taken over when its holder died.

``OUT/.lock`` holds ``{"pid", "host", "started"}`` of the process working in ``OUT``. Where the platform has
``fcntl`` the file is also ``flock``-ed for the life of the process, so the kernel releases it when the holder dies
however it died (SIGKILL included), and two processes racing for a stale lock cannot both win. Where it has not, the
holder's pid is checked instead (same host only). A second process refuses at once with a message naming the holder;
a lock whose holder is gone is taken over with a warning.

The rule of :mod:`st_magnitude._trust.owned` holds: a lock writes only into a file this process made. Its record is
written into a file created here with ``O_CREAT | O_EXCL`` (never through a symlink), and a stale lock is taken over
by writing a *new* file beside it and renaming it over the old name -- never by writing into the existing inode. An
existing lock file is opened read-only and without following a symlink (``O_NOFOLLOW``; ``O_NONBLOCK`` so a FIFO
cannot hang the open), and refused in one line naming it (:class:`~st_magnitude._trust.InputFileError`) when it is
not a regular file (a symlink, a FIFO, a socket, a folder), has other names (a hard link: ``st_nlink > 1``, so
replacing or writing it would touch another file), or holds something other than this package's lock record. On
release, the file is removed only while it is still the one this process wrote.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import socket
import stat
import tempfile
import time
from pathlib import Path
from typing import Any

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows: pid check only
    fcntl = None

from st_magnitude._trust import InputFileError, read_json
from st_magnitude._trust.owned import identity_of, record

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


#: How :func:`_open_lock_file` opens: an existing file read-only (nothing is ever written into it), not through a
#: symlink, never blocking (a FIFO), not inherited; a new one read-write, created exclusively.
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_CREATE_FLAGS = (
    os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
)  # fmt: skip


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


def _open_lock_file(path: Path, advice: str, *, create: bool) -> tuple[int, bool] | None:
    """``(descriptor, made)`` of the regular file ``path``: made here (``O_CREAT | O_EXCL``, read-write, recorded as
    this run's) when it was missing and ``create``, else the existing one opened read-only; None when it is missing
    and not ``create``; :class:`InputFileError` naming it when it is anything else."""
    for _ in range(20):  # retries only while another process creates or removes the file under us
        made = False
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except FileNotFoundError:
            if not create:
                return None
            try:
                fd = os.open(path, _CREATE_FLAGS, 0o644)
                made = True
            except FileExistsError:
                continue  # made meanwhile: open what is there now, as it is
            except OSError as exc:
                raise _not_a_lock(path, advice, exc=exc) from None
        except OSError as exc:  # ELOOP: a symlink (dangling too); ENXIO: a socket; EISDIR: a folder
            if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise
            raise _not_a_lock(path, advice, exc=exc) from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise _not_a_lock(path, advice, st.st_mode)
        if made:
            record(path)
        return fd, made
    raise FolderLocked(f"could not open {path}: it keeps being created and removed by another process")


def _foreign(path: Path, advice: str, fd: int, info: dict[str, Any] | None) -> InputFileError | None:
    """Why the existing lock file ``path`` (open as ``fd``, its record ``info``) may not be replaced, or None."""
    st = os.fstat(fd)
    if st.st_nlink > 1:
        return InputFileError(
            path,
            f"has {st.st_nlink} names (a hard link to another file), not the lock file this package writes: writing "
            f"or replacing it would change that other file. Nothing was written to it; remove it, or {advice}",
        )
    if st.st_size and not (info and {"pid", "host", "started"} <= set(info)):
        return InputFileError(
            path,
            f"holds no lock record of this package ({st.st_size} bytes of something else). Nothing was written to "
            f"it; remove it, or {advice}",
        )
    return None


def _describe(info: dict[str, Any]) -> str:
    started = info.get("started")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)) if isinstance(started, (int, float)) else "?"
    return f"pid {info.get('pid', '?')} on host {info.get('host', '?')}, started {when}"


def _identity(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return (st.st_dev, st.st_ino)


def _write_record(fd: int) -> None:
    """This process's record into ``fd``, a file this process made."""
    info = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
    os.pwrite(fd, json.dumps(info).encode("utf-8"), 0)
    os.fsync(fd)


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
            opened = _open_lock_file(self.path, self.advice, create=False)
        except FileNotFoundError:
            return  # no folder: free
        if opened is None:
            return  # no lock file: free
        fd = opened[0]
        try:
            if fcntl is not None:
                self._flock_or_refuse(fd)
                fcntl.flock(fd, fcntl.LOCK_UN)
            elif self._held_by_live_process(self.holder()):
                raise self._refuse(self.holder())
            refusal = _foreign(self.path, self.advice, fd, self.holder())
            if refusal is not None:
                raise refusal
        finally:
            os.close(fd)

    def acquire(self) -> OutputLock:
        if self._fd is not None:
            raise RuntimeError("lock already held by this object")
        self.folder.mkdir(parents=True, exist_ok=True)
        for _ in range(20):  # retries only when the file was replaced under us
            fd, made = _open_lock_file(self.path, self.advice, create=True)
            try:
                if fcntl is not None:
                    try:
                        self._flock_or_refuse(fd)
                    except FolderLocked:
                        if not self._taken_over_meanwhile(fd):
                            raise
                        os.close(fd)
                        continue  # another process replaced a stale lock: refuse naming it, not the dead one
                    # the holder may have removed or replaced the file between our open and flock: lock the one on disk
                    if identity_of(self.path) != _identity(fd):
                        os.close(fd)
                        continue
                if made:  # this process made it (O_EXCL): its record goes into it
                    _write_record(fd)
                    self._fd = fd
                    return self
                self._fd = self._take_over(fd)
                return self
            except BaseException:
                if self._fd != fd:
                    os.close(fd)
                raise
        raise FolderLocked(f"could not lock {self.path}: it keeps being replaced by another process")

    def _taken_over_meanwhile(self, fd: int) -> bool:
        """Whether the locked file ``fd`` names a holder that is gone, while another process is replacing it (it
        holds the old file's lock for that moment): wait up to a second for the new file."""
        info = self.holder()
        if not info or info.get("host") != socket.gethostname() or self._held_by_live_process(info):
            return False
        for _ in range(100):
            if identity_of(self.path) != _identity(fd):
                return True
            time.sleep(0.01)
        return False

    def _take_over(self, old: int) -> int:
        """Replace the existing lock file (open read-only as ``old``, flocked where the platform can) whose holder is
        gone by a new file of this process, renamed over its name; ``old`` is closed. The new descriptor."""
        info = self.holder()
        refusal = _foreign(self.path, self.advice, old, info)
        if refusal is not None:
            raise refusal
        if fcntl is None and self._held_by_live_process(info):
            raise self._refuse(info)
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=f"{self.path.name}.", suffix=".new")  # O_EXCL
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # nobody else can know this file yet
            _write_record(fd)
            os.replace(tmp, self.path)  # the old inode is never written: its name now names ours
            record(self.path)
        except BaseException:
            os.close(fd)
            Path(tmp).unlink(missing_ok=True)
            raise
        os.close(old)  # only now: a racer that locks the old inode finds it replaced and retries
        if info:
            self.took_over = info
            logger.warning(
                "taking over the stale lock of %s left by %s (no longer running)", self.folder, _describe(info)
            )
        return fd

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            # remove the file while still holding the lock, so nobody can lock the old inode after we let go; only
            # while its name still names the file this process wrote
            if identity_of(self.path) == _identity(self._fd):
                self.path.unlink(missing_ok=True)
        finally:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> OutputLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
