"""Small disks for fault tests: a tmpfs mounted for one broker's data dir, filled to the
last byte and freed again. The machines run as root (`mount -t tmpfs`); a mount that
fails fails the test with the reason, never skips it."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

FILLER = "zz-filler"


@contextlib.contextmanager
def small_tmpfs(path: Path, size_mb: int) -> Iterator[Path]:
    """A tmpfs of `size_mb` MiB mounted at `path` (created) for the block; unmounted after."""
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
                          capture_output=True, text=True)
    assert done.returncode == 0, f"cannot mount a tmpfs at {path} (root needed): {done.stderr}"
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(path: Path) -> Path:
    """Write a file into `path` until its file system has no byte left; the file."""
    filler = path / FILLER
    with open(filler, "wb", buffering=0) as out:
        for size in (1 << 16, 1):  # big writes, then the last bytes one by one
            with contextlib.suppress(OSError):
                while out.write(b"\0" * size):
                    pass
    return filler


def free(filler: Path) -> None:
    filler.unlink(missing_ok=True)
