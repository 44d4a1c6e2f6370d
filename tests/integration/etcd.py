"""A real etcd server process for cluster tests (the binary from scripts/etcd.sh).

`EtcdProcess` owns one single-member etcd on 127.0.0.1 with its own data dir;
it can be killed (SIGKILL), paused (SIGSTOP) and restarted on the same ports
and data, as the cluster tests need. A missing binary fails the test with the
command that installs it, never skips it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from tests.integration.harness import free_port, port_open, stop

ROOT = Path(__file__).resolve().parents[2]
ETCD_BINARY = Path(os.environ.get("GREGOR_ETCD", ROOT / ".deps" / "etcd" / "etcd"))


def etcd_binary() -> Path:
    if not ETCD_BINARY.exists():
        raise AssertionError(
            f"etcd is not installed at {ETCD_BINARY}: run `make etcd` (scripts/etcd.sh .deps/etcd)"
        )
    return ETCD_BINARY


class EtcdProcess:
    def __init__(self, data_dir: Path, host: str = "127.0.0.1", wrapper: list[str] | None = None) -> None:
        """`host`/`wrapper`: another address and a command prefix (a network namespace's)."""
        self.data_dir = data_dir
        self.host = host
        self.wrapper = wrapper or []
        self.client_port = free_port() if host == "127.0.0.1" else 2379
        self.peer_port = free_port() if host == "127.0.0.1" else 2380
        self.log_path = data_dir.with_suffix(".log")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"etcd://{self.host}:{self.client_port}"

    def start(self, timeout: float = 20.0) -> EtcdProcess:
        client = f"http://{self.host}:{self.client_port}"
        peer = f"http://{self.host}:{self.peer_port}"
        command = [
            *self.wrapper, str(etcd_binary()), "--name", "gregor-test", "--data-dir", str(self.data_dir),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"gregor-test={peer}", "--log-level", "warn",
        ]
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        assert self.proc is not None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"etcd exited during start-up:\n{self.log_tail()}")
            with contextlib.suppress(OSError):
                if self._listening():
                    return
            time.sleep(0.05)
        raise AssertionError(f"etcd did not listen on {self.client_port} within {timeout}s")

    def _listening(self) -> bool:
        return port_open(self.host, self.client_port, self.wrapper)

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def kill9(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def pause(self) -> None:
        assert self.proc is not None
        stop(self.proc.pid, "etcd")

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def restart(self) -> EtcdProcess:
        self.kill9()
        return self.start()

    def close(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGCONT)
        self.kill9()
