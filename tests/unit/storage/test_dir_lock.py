"""storage.dir_lock: an exclusive lock per log dir that names its holder."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.dir_lock import LOCK_FILE, DirLock, LogDirLockedError, lock_dirs, release_all


def test_second_lock_fails_naming_the_holder_and_leaves_the_file(tmp_path: Path) -> None:
    held = DirLock.acquire(tmp_path, "pid=1 node.id=1 listener=PLAINTEXT://h:1")
    before = (tmp_path / LOCK_FILE).read_bytes()
    with pytest.raises(LogDirLockedError, match="pid=1 node.id=1 listener=PLAINTEXT://h:1") as info:
        DirLock.acquire(tmp_path, "pid=2")
    assert str(tmp_path) in str(info.value)
    assert (tmp_path / LOCK_FILE).read_bytes() == before
    held.release()
    again = DirLock.acquire(tmp_path, "pid=3")
    assert (tmp_path / LOCK_FILE).read_text() == "pid=3\n"
    again.release()


def test_lock_dirs_releases_what_it_took_when_one_is_busy(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    busy = DirLock.acquire(b, "other")
    with pytest.raises(LogDirLockedError):
        lock_dirs([a, b], "me")
    DirLock.acquire(a, "third").release()  # a was released again
    busy.release()
    locks = lock_dirs([a, b], "me")
    assert all(lock.held for lock in locks)
    release_all(locks)
