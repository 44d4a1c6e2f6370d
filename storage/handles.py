"""A bounded cache of open file descriptors for segment and index files.

Kafka keeps one channel per segment open and maps indexes lazily; a broker with
thousands of partitions then needs tens of thousands of descriptors. Here every
segment file is a ``CachedFile``: it is opened on first use, kept in one
process-wide least-recently-used cache, and closed when the cache is full and it
is the least recently used. The active segments of busy partitions stay open
because they are used all the time; old segments and idle partitions cost no
descriptor. The bound defaults to half the process's soft ``RLIMIT_NOFILE`` so
that connections and short-lived files keep the other half.

Every operation takes the descriptor and uses it at once, so a descriptor is
never held across another file's open (which could evict it). All of this runs
on the broker's single event-loop thread; the cache is not thread-safe.
"""

from __future__ import annotations

import errno
import os
import resource
from collections import OrderedDict
from pathlib import Path

MIN_CAPACITY = 16
DEFAULT_CAPACITY_SHARE = 2  # use at most 1/2 of the soft RLIMIT_NOFILE


class FileClosedError(OSError):
    """A read or write on a segment file after it was closed or deleted."""

    def __init__(self, path: Path) -> None:
        super().__init__(errno.EBADF, "segment file is closed", str(path))


def default_capacity() -> int:
    """Half the soft open-files limit, at least MIN_CAPACITY."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 16
    return max(MIN_CAPACITY, soft // DEFAULT_CAPACITY_SHARE)


class HandleCache:
    """Open descriptors of ``CachedFile`` objects, least recently used first.
    Invariant: at most ``capacity`` files are open through the cache."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"handle cache capacity must be positive, got {capacity}")
        self._capacity = capacity
        self._open: OrderedDict[CachedFile, None] = OrderedDict()
        self.opens = 0  # descriptors opened so far (for tests and benchmarks)

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def open_count(self) -> int:
        return len(self._open)

    def resize(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"handle cache capacity must be positive, got {capacity}")
        self._capacity = capacity
        self._evict_to(capacity)

    def open(self, path: Path, flags: int) -> int:
        """Open a descriptor for a file about to join the cache, making room first.
        Out of descriptors (EMFILE/ENFILE), half the cache is closed and it retries once."""
        self._evict_to(self._capacity - 1)
        try:
            fd = os.open(path, flags, 0o644)
        except OSError as exc:
            if exc.errno not in (errno.EMFILE, errno.ENFILE) or not self._open:
                raise
            self._evict_to(len(self._open) // 2)
            fd = os.open(path, flags, 0o644)
        self.opens += 1
        return fd

    @property
    def lru(self) -> OrderedDict[CachedFile, None]:
        """The open files, least recently used first (CachedFile moves itself to the end)."""
        return self._open

    def added(self, file: CachedFile) -> None:
        self._open[file] = None

    def removed(self, file: CachedFile) -> None:
        self._open.pop(file, None)

    def _evict_to(self, size: int) -> None:
        while len(self._open) > max(size, 0):
            oldest, _ = self._open.popitem(last=False)
            oldest.release()


HANDLES = HandleCache(default_capacity())


class CachedFile:
    """One segment or index file whose descriptor lives in a ``HandleCache``.

    ``dirty`` says whether the file may hold data not yet fsynced by this object:
    true from opening (what an earlier process wrote is not known to be synced)
    until the first ``fsync``, and again after every write or truncation. A flush of
    a clean file costs nothing and does not reopen it."""

    __slots__ = ("_cache", "_closed", "_fd", "_lru", "dirty", "path")

    def __init__(self, path: Path, cache: HandleCache | None = None, create: bool = True) -> None:
        """Open ``path`` (creating it when ``create``; FileNotFoundError otherwise)."""
        self.path = path
        self._cache = cache or HANDLES
        self._lru = self._cache.lru  # the hot path touches it directly
        self._closed = False
        self.dirty = True
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        self._fd = self._cache.open(path, flags)
        self._cache.added(self)

    def fd(self) -> int:
        """The open descriptor, reopening the file when it was evicted."""
        if self._fd >= 0:
            self._lru.move_to_end(self)
            return self._fd
        return self._reopen()

    def _reopen(self) -> int:
        if self._closed:
            raise FileClosedError(self.path)
        self._fd = self._cache.open(self.path, os.O_RDWR)
        self._cache.added(self)
        return self._fd

    @property
    def is_open(self) -> bool:
        """Whether a descriptor is held right now (evicted files are not)."""
        return self._fd >= 0

    @property
    def closed(self) -> bool:
        return self._closed

    def pread(self, length: int, position: int) -> bytes:
        fd = self._fd  # fd() inlined: this is the fetch path
        if fd >= 0:
            self._lru.move_to_end(self)
        else:
            fd = self._reopen()
        return os.pread(fd, length, position)

    def pwrite_all(self, data: bytes | bytearray | memoryview, position: int) -> None:
        view = memoryview(data)
        self.dirty = True
        while view:
            written = os.pwrite(self.fd(), view, position)
            view = view[written:]
            position += written

    def truncate(self, size: int) -> None:
        self.dirty = True
        os.ftruncate(self.fd(), size)

    def size(self) -> int:
        return os.fstat(self.fd()).st_size

    def fsync(self) -> None:
        if self.dirty:
            os.fsync(self.fd())
            self.dirty = False

    def release(self) -> None:
        """Close the descriptor (eviction); the next use reopens the file."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            self._cache.removed(self)
            os.close(fd)

    def close(self) -> None:
        """Close for good: later reads and writes raise FileClosedError."""
        self._closed = True
        self.release()

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("open" if self._fd >= 0 else "evicted")
        return f"CachedFile({self.path.name}, {state})"
