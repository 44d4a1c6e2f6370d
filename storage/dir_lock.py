"""One broker per log dir: an exclusive `flock` on `<dir>/.lock`, as Kafka's LogManager
takes before it touches a log dir.

The lock is taken without writing anything else; only once it is held does the file
get the holder's description (pid, node id, listener), so that a second broker can
say who holds the dir. The kernel releases an flock when its holder exits, even by
kill -9, so a stale `.lock` file never blocks a start.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterable
from pathlib import Path

LOCK_FILE = ".lock"
_MAX_HOLDER_BYTES = 512


class LogDirLockedError(Exception):
    """Another process holds the lock of a log dir."""

    def __init__(self, directory: Path, holder: str) -> None:
        self.directory = directory
        self.holder = holder
        super().__init__(
            f"log dir {directory} is in use by another broker ({holder or 'holder unknown'}); "
            "only one broker may use a log dir at a time"
        )


class LogDirUnusableError(Exception):
    """A log dir that cannot be created or locked (permissions, not a directory...), or whose
    logs cannot be loaded (a full disk or an I/O error during recovery)."""


class DirLock:
    """An exclusive lock on one log dir, held while the file descriptor is open."""

    def __init__(self, directory: Path, fd: int) -> None:
        self.directory = directory
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, directory: Path, holder: str) -> DirLock:
        """Lock `directory` (which must exist) and write `holder` into the lock file;
        raise LogDirLockedError, leaving the file as it was, if another holds it."""
        path = directory / LOCK_FILE
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise LogDirUnusableError(f"cannot open {path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            current = _read_holder(fd)
            os.close(fd)
            raise LogDirLockedError(directory, current) from None
        except BaseException:
            os.close(fd)
            raise
        lock = cls(directory, fd)
        lock._write_holder(holder)
        return lock

    def _write_holder(self, holder: str) -> None:
        assert self._fd is not None
        data = holder.encode()[:_MAX_HOLDER_BYTES] + b"\n"
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        os.close(fd)  # closing the only descriptor drops the flock


def _read_holder(fd: int) -> str:
    try:
        return os.pread(fd, _MAX_HOLDER_BYTES, 0).decode(errors="replace").strip()
    except OSError:
        return ""


def lock_dirs(directories: Iterable[Path], holder: str) -> list[DirLock]:
    """Lock every dir in order; on a failure release the ones already taken and raise."""
    taken: list[DirLock] = []
    try:
        for directory in directories:
            taken.append(DirLock.acquire(directory, holder))
    except BaseException:
        release_all(taken)
        raise
    return taken


def release_all(locks: Iterable[DirLock]) -> None:
    for lock in locks:
        lock.release()
