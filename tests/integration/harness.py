"""Start real Gregor broker processes for integration tests, and shared helpers.

A `BrokerProcess` owns one `gregor broker` subprocess: its YAML config, its data
dir and its stderr log, all under one work dir. It can be stopped cleanly
(SIGTERM), crashed (SIGKILL) and restarted on the same port and data dir.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
JAVA_DIR = Path(__file__).resolve().parent / "java"
JAVA_DEPS = REPO_ROOT / ".deps" / "java"
# The Java client jar sets `make java-deps` copies from Maven Central (scripts/kafka/clients-pom.xml):
# 3.9 speaks transaction version 1, 4.3 transaction version 2 (KIP-890 part 2) when the broker
# finalizes it.
JAVA_CLIENTS = {"3.9": JAVA_DEPS, "4.3": REPO_ROOT / ".deps" / "java4"}
JAVA_CLASSES = REPO_ROOT / ".deps" / "java-classes"  # the Java programs, compiled (java_classes)

START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 15.0
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


class BrokerStartError(RuntimeError):
    pass


_HANDED_OUT: set[int] = set()


def _port_share() -> tuple[int, int]:
    """(this pytest-xdist worker's index, the number of workers); (0, 1) outside xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(worker.removeprefix("gw")), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))


def stop(pid: int, what: str) -> None:
    """SIGSTOP `pid` and return once the kernel shows it stopped: the signal is delivered
    asynchronously, and a process on a loaded machine may answer a request or two after
    `kill` returned (a CI run's etcd reserved one more producer-id block after its pause)."""
    os.kill(pid, signal.SIGSTOP)
    stat = Path(f"/proc/{pid}/stat")
    wait_until(lambda: stat.read_text().rsplit(")", 1)[1].split()[0] == "T", 5, 0.01, f"{what} stopped")


def terminate(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM, and SIGKILL if it has not exited within `timeout` (a reference broker's stop)."""
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def free_port() -> int:
    """A loopback port nothing listens on, never one this process handed out before: the
    kernel may give a just-closed port again, and a fixture asking for six ports at once must
    not start two brokers on one (CI of 2cc71c4: broker 3 got broker 1's PLAINTEXT port).
    Under pytest-xdist each worker takes only its share of the ports (by `port // 2`: Linux's
    bind to port 0 hands out odd ports only), so two workers never hand out one port."""
    index, workers = _port_share()
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if (port // 2) % workers == index and port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def port_open(host: str, port: int, wrapper: list[str] | None = None) -> bool:
    """True when `host:port` accepts a connection; with a `wrapper` (`ip netns exec NS`),
    as seen from inside that namespace."""
    if wrapper:
        return _exits_0_in(wrapper, f"import socket; socket.create_connection(({host!r}, {port}), 0.5)")
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def own_code_first() -> None:
    """Every process the tests start (brokers, `gregor` commands) imports this checkout's code:
    the virtualenv's editable install points at the checkout that made it, which in another
    git worktree sharing the virtualenv is not this one."""
    paths = [str(REPO_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))


def gregor_command() -> list[str]:
    script = Path(sys.executable).with_name("gregor")
    if script.exists():
        return [str(script)]
    found = shutil.which("gregor")
    if found:
        return [found]
    return [sys.executable, "-c", "import sys; from broker.cli import main; sys.exit(main())"]


def api_versions_answered(host: str, port: int, wrapper: list[str]) -> bool:
    """True when the broker at `host:port` answers ApiVersions, asked from inside the namespace
    of `wrapper` (`ip netns exec NS`). A connection alone proves little: a broker binds its
    listener before its log recovery, and serves only after it."""
    return _exits_0_in(wrapper, "import sys; from tests.integration.harness import _api_versions_probe as p; "
                                f"sys.exit(0 if p({port}, 1.0, {host!r}) else 1)")


def _exits_0_in(wrapper: list[str], code: str) -> bool:
    """True when Python code run inside the namespace of `wrapper` exits 0 (the repository as
    its working directory, so it can import the tests' own modules)."""
    done = subprocess.run([*wrapper, sys.executable, "-c", code], capture_output=True,
                          cwd=Path(__file__).resolve().parents[2])
    return done.returncode == 0


def _api_versions_probe(port: int, timeout: float, host: str = "127.0.0.1") -> bool:
    """True when the broker answers an ApiVersions v0 request on `host:port`."""
    correlation_id = 0x4752
    client_id = b"gregor-harness"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(struct.pack(">i", len(body)) + body)
            head = _recv_exact(s, 8)
    except OSError:
        return False
    if head is None:
        return False
    _size, got_id = struct.unpack(">ii", head)
    return got_id == correlation_id


def _recv_exact(s: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


class BrokerProcess:
    """One `gregor broker` subprocess with its own config, data dir and log."""

    def __init__(
        self,
        workdir: Path,
        overrides: dict[str, Any] | None = None,
        node_id: int = 1,
        port: int | None = None,
    ) -> None:
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.data_dir = workdir / "data"
        self.config_path = workdir / "broker.yaml"
        self.log_path = workdir / "broker.log"
        self.config: dict[str, Any] = {
            "node.id": node_id,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.data_dir),
            "num.partitions": 1,
            "default.replication.factor": 1,
            "auto.create.topics.enable": True,
            "log.segment.bytes": 1073741824,
        }
        self.config.update(overrides or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.preexec_fn: Callable[[], None] | None = None  # runs in the child, e.g. setrlimit
        self.env: dict[str, str] = {}  # extra environment of the next starts
        self.wrapper: list[str] = []  # runs the broker, e.g. `ip netns exec NS` (fault tests)

    # -- addressing -------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def partition_dir(self, topic: str, partition: int = 0) -> Path:
        return self.data_dir / f"{topic}-{partition}"

    # -- lifecycle --------------------------------------------------------

    def start(self, timeout: float = START_TIMEOUT_S) -> BrokerProcess:
        if self.running:
            raise RuntimeError("broker already running")
        self.config_path.write_text(yaml.safe_dump(self.config, sort_keys=False))
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== harness: start #{self.starts} =====\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                [*self.wrapper, *gregor_command(), "broker", "--config", str(self.config_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
                preexec_fn=self.preexec_fn,
            )
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        assert self.proc is not None
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                self.proc = None
                raise BrokerStartError(f"broker exited with code {code} during start-up\n{self.log_tail()}")
            if self.answers():
                return
            time.sleep(0.05)
        self.kill9()
        raise BrokerStartError(
            f"broker did not answer ApiVersions on {self.bootstrap} within {timeout}s\n{self.log_tail()}"
        )

    def answers(self) -> bool:
        """True once the broker answers ApiVersions (a subclass may ask otherwise)."""
        return _api_versions_probe(self.port, timeout=1.0)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """Clean shutdown (SIGTERM); returns the exit code. Kills if it hangs."""
        if self.proc is None:
            return 0
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError(
                f"broker did not exit within {timeout}s of SIGTERM\n{self.log_tail()}"
            ) from None

    def kill9(self) -> None:
        """Crash the broker: SIGKILL, no chance to flush or clean up."""
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.kill()
        proc.wait()

    def pause(self) -> None:
        """SIGSTOP: the process stays, does nothing (its sessions lapse if it stays so).
        Returns once the kernel shows it stopped."""
        assert self.proc is not None
        stop(self.proc.pid, f"broker {self.bootstrap}")

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    @property
    def node_id(self) -> int:
        return int(self.config["node.id"])

    def restart(self, clean: bool = True) -> BrokerProcess:
        if clean:
            self.stop()
        else:
            self.kill9()
        return self.start()

    def close(self) -> None:
        self.kill9()

    # -- logs ---------------------------------------------------------------

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 80) -> str:
        text = self.log_text().splitlines()[-lines:]
        return f"--- {self.log_path} (last {len(text)} lines) ---\n" + "\n".join(text)


class BrokerFactory:
    """Creates brokers under a base dir and kills them all on close()."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.brokers: list[BrokerProcess] = []

    def __call__(
        self, overrides: dict[str, Any] | None = None, start: bool = True, **kw: Any
    ) -> BrokerProcess:
        b = BrokerProcess(self.base / f"broker{len(self.brokers)}", overrides, **kw)
        self.brokers.append(b)
        return b.start() if start else b

    def close(self) -> None:
        for b in self.brokers:
            b.close()


@contextlib.contextmanager
def started_broker(base: Path, overrides: dict[str, Any] | None = None) -> Iterator[BrokerProcess]:
    """One broker under `base` (for module-scoped fixtures), killed on exit."""
    factory = BrokerFactory(base)
    try:
        yield factory(overrides)
    finally:
        factory.close()


# -- test data ------------------------------------------------------------


@dataclass(frozen=True)
class Rec:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def make_records(n: int, base_ts: int | None = None, tag: str = "r") -> list[Rec]:
    """Deterministic records: varied sizes (incl. empty and null), keys, headers.

    Timestamps are strictly increasing by 10 ms from `base_ts` (default: 100 s
    ago), so offsets-for-times answers are exact.
    """
    if base_ts is None:
        base_ts = int(time.time() * 1000) - 100_000
    out = []
    for i in range(n):
        key = None if i % 17 == 5 else f"{tag}-key-{i % 23}".encode()
        if i % 31 == 7:
            value: bytes | None = None
        elif i % 29 == 3:
            value = b""
        else:
            word = f"{tag}:{i:06d}:".encode()
            value = word * (1 + (i * 37) % 60) + bytes([i % 256, 0, 255])
        headers: tuple[tuple[str, bytes], ...] = ()
        if i % 3:
            headers = (("idx", str(i).encode()), ("bin", bytes([i % 256, 0, 1])))
        if i % 11 == 0:
            headers = (*headers, ("empty", b""))
        out.append(Rec(key, value, headers, base_ts + 10 * i))
    return out


def norm_headers(h: Any) -> tuple[tuple[str, bytes], ...]:
    if not h:
        return ()
    return tuple((k if isinstance(k, str) else k.decode(), bytes(v or b"")) for k, v in h)


def assert_same_records(sent: list[Rec], got: list[Rec]) -> None:
    assert len(got) == len(sent), f"sent {len(sent)} records, consumed {len(got)}"
    for i, (s, g) in enumerate(zip(sent, got, strict=True)):
        assert g.key == s.key, f"record {i}: key {g.key!r} != {s.key!r}"
        assert g.value == s.value, f"record {i}: value differs ({_short(g.value)} != {_short(s.value)})"
        assert g.headers == s.headers, f"record {i}: headers {g.headers!r} != {s.headers!r}"
        assert g.timestamp == s.timestamp, f"record {i}: timestamp {g.timestamp} != {s.timestamp}"


def _short(b: bytes | None) -> str:
    if b is None:
        return "None"
    return repr(b[:40]) + (f"...({len(b)} bytes)" if len(b) > 40 else "")


def wait_until(pred: Any, timeout: float = 10.0, interval: float = 0.05, msg: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = pred()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {msg or pred}")
        time.sleep(interval)


# -- on-disk inspection -----------------------------------------------------


def segment_files(partition_dir: Path, suffix: str = ".log") -> list[Path]:
    return sorted(partition_dir.glob(f"{'[0-9]' * 20}{suffix}"))


def _batch_spans(data: bytes) -> Iterator[tuple[int, int, int, int]]:
    """(position, end, baseOffset, lastOffsetDelta) of each whole batch in `data`."""
    pos = 0
    while pos + 61 <= len(data):
        base_offset, length = struct.unpack_from(">qi", data, pos)
        if length < 49 or pos + 12 + length > len(data):
            return
        (last_delta,) = struct.unpack_from(">i", data, pos + 23)
        yield pos, pos + 12 + length, base_offset, last_delta
        pos += 12 + length


def iter_batches(log_file: Path) -> Iterator[tuple[int, int, int]]:
    """(file position, baseOffset, lastOffsetDelta) of each whole batch in a .log file."""
    for pos, _end, base_offset, last_delta in _batch_spans(log_file.read_bytes()):
        yield pos, base_offset, last_delta


def whole_batches(log_file: Path) -> list[bytes]:
    """The bytes of each whole batch of a .log file, read once: a live broker may be
    appending, and a batch it has only half written is left out."""
    data = log_file.read_bytes()
    return [data[pos:end] for pos, end, _base, _delta in _batch_spans(data)]


def whole_batches_end(log_file: Path) -> int:
    """File position just past the last whole batch of a .log file."""
    return max((end for _pos, end, _base, _delta in _batch_spans(log_file.read_bytes())), default=0)


def read_offset_index(index_file: Path) -> list[tuple[int, int]]:
    """Entries of a Kafka `.index` file, dropping trailing zero padding.

    (0, 0) is a real entry only in first place; later ones are the padding of
    a preallocated (active) index.
    """
    data = index_file.read_bytes()
    entries = [struct.unpack_from(">ii", data, i) for i in range(0, len(data) - len(data) % 8, 8)]
    while len(entries) > 1 and entries[-1] == (0, 0):
        entries.pop()
    return entries


@contextlib.contextmanager
def timer(label: str) -> Iterator[None]:
    t0 = time.monotonic()
    yield
    print(f"{label}: {time.monotonic() - t0:.2f}s")


# -- the Java client ------------------------------------------------------------


def require_java(client: str = "3.9") -> None:
    """Fail (never skip) when the Java client is missing: `make test` installs it."""
    if shutil.which("java") is None:
        pytest.fail("no `java` on PATH: the Java client tests need Java 17")
    deps = JAVA_CLIENTS[client]
    if not (deps / ".installed").exists():
        pytest.fail(f"Kafka Java client {client} not installed in {deps} (run `make java-deps`)")


def java_command(program: str, *args: str, client: str = "3.9") -> list[str]:
    """`java` running the single-file program tests/integration/java/<program> with the
    kafka-clients jar set `client` (a key of JAVA_CLIENTS) on the classpath, compiled once
    (`java_classes`) rather than by the source launcher at every start (about 1 s each)."""
    classes = java_classes(JAVA_DIR / program, client)
    return ["java", "-cp", f"{JAVA_CLIENTS[client]}/*{os.pathsep}{classes}", Path(program).stem, *args]


def java_classes(source: Path, client: str = "3.9", jars: Path | None = None) -> Path:
    """The directory of `source` compiled against `client`'s jars (or `jars`), made once per
    content in .deps/java-classes (another process compiling it at the same time: either
    result is kept). A program that does not compile fails the test with javac's message."""
    jars = jars or JAVA_CLIENTS[client]
    against = "\n".join([str(jars), *sorted(p.name for p in jars.glob("*.jar"))])
    digest = hashlib.sha256(source.read_bytes() + against.encode()).hexdigest()[:16]
    classes = JAVA_CLASSES / f"{source.stem}-{digest}"
    if classes.is_dir():
        return classes
    JAVA_CLASSES.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{source.stem}-", dir=JAVA_CLASSES))
    done = subprocess.run(["javac", "-nowarn", "-cp", f"{jars}/*", "-d", str(building), str(source)],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        shutil.rmtree(building, ignore_errors=True)
        pytest.fail(f"javac {source.name} failed:\n{done.stdout}{done.stderr}")
    try:
        building.rename(classes)
    except OSError:  # compiled meanwhile by another process
        shutil.rmtree(building, ignore_errors=True)
    return classes


def run_java(
    program: str, *args: str, timeout: float = 300, client: str = "3.9"
) -> subprocess.CompletedProcess[str]:
    """Run a Java program to its end (from the repo root); stdout and stderr captured as text."""
    return subprocess.run(
        java_command(program, *args, client=client), capture_output=True, text=True, timeout=timeout,
        cwd=REPO_ROOT,
    )


def prefixed_json(stdout: str, prefix: str = "RESULT ") -> list[Any]:
    """The JSON payload of every output line that starts with `prefix`."""
    return [json.loads(x[len(prefix) :]) for x in stdout.splitlines() if x.startswith(prefix)]
