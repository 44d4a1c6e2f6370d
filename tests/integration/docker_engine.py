"""A Docker engine and Docker Compose for the compose tests (scripts/docker-engine.sh installs them).

An engine that already answers (a developer's laptop) is used as it is. Otherwise
`running_engine` starts Debian's dockerd in the background (with this machine's MTU),
waits for `docker info` and stops it by its pid at the end. Images are built on the
local base `BASE_IMAGE`, imported from the debootstrap root file system the script
cached, so no container registry is needed. When something is missing or the engine
cannot start, the test fails with the reason (it never skips).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEPS = ROOT / ".deps" / "docker"
SCRIPT = ROOT / "scripts" / "docker-engine.sh"
BASE_IMAGE = "gregor-base:bookworm"
LOCAL_CA_DIR = Path("/usr/local/share/ca-certificates")
MTU = "1400"
ENGINE_START_S = 60


def compose_command() -> list[str]:
    """Docker Compose v2: `docker compose` when the CLI has the plugin, else the binary
    scripts/docker-engine.sh keeps in .deps/docker; fails naming the fix when neither."""
    if shutil.which("docker") and _quiet(["docker", "compose", "version"]) == 0:
        return ["docker", "compose"]
    binary = DEPS / "docker-compose"
    if binary.exists():
        return [str(binary)]
    pytest.fail("no Docker Compose v2 (`docker compose`): run `make docker-deps`")


def _quiet(cmd: list[str], timeout: float = 30) -> int:
    try:
        return subprocess.run(cmd, capture_output=True, timeout=timeout).returncode
    except (OSError, subprocess.TimeoutExpired):
        return -1


def engine_answers() -> bool:
    return shutil.which("docker") is not None and _quiet(["docker", "info"]) == 0


@contextmanager
def running_engine(log_path: Path) -> Iterator[None]:
    """The engine that answers, or dockerd started here and stopped (by pid) afterwards."""
    if engine_answers():
        yield
        return
    proc = _start_dockerd(log_path)
    try:
        yield
    finally:
        _stop(proc)


def _start_dockerd(log_path: Path) -> subprocess.Popen[bytes]:
    dockerd = shutil.which("dockerd")
    if dockerd is None or shutil.which("docker") is None:
        pytest.fail("no Docker engine answers and dockerd is not installed: run `make docker-deps`")
    with log_path.open("wb") as log:
        proc = subprocess.Popen([dockerd, "--mtu", MTU], stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    deadline = time.monotonic() + ENGINE_START_S
    while not engine_answers():
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc)
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-15:])
            pytest.fail(f"dockerd did not start (exit {proc.returncode}); its log ({log_path}):\n{tail}")
        time.sleep(0.2)
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def import_base_image() -> str:
    """BASE_IMAGE in the engine, imported from the cached debootstrap tar when missing."""
    if not (DEPS / "bookworm-minbase.tar").exists():
        pytest.fail(f"no base root file system in {DEPS}: run `make docker-deps`")
    done = subprocess.run(["bash", str(SCRIPT), "import", str(DEPS), BASE_IMAGE],
                          capture_output=True, text=True)
    assert done.returncode == 0, f"docker import failed: {done.stderr}"
    return BASE_IMAGE


def local_ca_certs() -> str:
    """The CA certificates added to this machine (update-ca-certificates' local dir), for
    image builds on a network that intercepts TLS; empty when there are none."""
    if not LOCAL_CA_DIR.is_dir():
        return ""
    return "".join(p.read_text() for p in sorted(LOCAL_CA_DIR.glob("**/*.crt")))


def compose_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GREGOR_")}
    env.update(extra)
    return env
