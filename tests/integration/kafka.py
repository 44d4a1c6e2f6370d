"""Apache Kafka itself (the jars `make kafka-deps` copies into .deps/kafka-4.4) as a test process.

A `KafkaNode` is one KRaft combined node (process.roles=broker,controller, a static
controller.quorum.voters): a generated server.properties on free ports, storage formatted with
`kafka.tools.StorageTool format`, log4j2 output in `kafka.log` of its work dir. Start-up waits
until the broker answers a Metadata request naming itself, never for a fixed time.

    with started_kafka(tmp_path) as kafka:
        ... kafka.bootstrap ...

A `KafkaCluster` is three such nodes forming one KRaft quorum (every node a voter and a broker,
Kafka's combined mode for a small cluster, `controller.quorum.voters` naming all three), one
cluster id; start-up waits until every node's Metadata answer lists all three brokers:

    with started_kafka_cluster(tmp_path) as kafka:
        ... kafka.bootstrap, kafka.nodes[0].port ...

`kafka_tool(main_class, *args)` runs one of Kafka's CLI tools the way its bin/ script does
(`kafka-run-class.sh <main class>`), from the same jars.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.harness import REPO_ROOT, free_port, terminate

KAFKA_VERSION = "4.4.0"  # the Makefile's kafka-deps target
KAFKA_DEPS = REPO_ROOT / ".deps" / "kafka-4.4"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
# Small heaps (the CI machine has 2 cores): C1 only and a serial collector start the JVM soonest.
JVM_OPTS = ["-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true"]
# What Kafka's own scripts start a broker with (kafka-server-start.sh, kafka-run-class.sh): for
# a benchmark, `KafkaNode(workdir, jvm_opts=SCRIPT_JVM_OPTS)`.
SCRIPT_JVM_OPTS = [
    "-Xmx1G",
    "-Xms1G",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
]
TOOL_JVM_OPTS = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]

# Settings that make a one-node Kafka answer as soon as a one-node Gregor does: internal topics
# of replication factor 1, no initial rebalance delay, a quick transaction-abort scan.
NODE_DEFAULTS: dict[str, object] = {
    "num.partitions": 1,
    "default.replication.factor": 1,
    "auto.create.topics.enable": True,
    "offsets.topic.replication.factor": 1,
    "offsets.topic.num.partitions": 1,
    "transaction.state.log.replication.factor": 1,
    "transaction.state.log.min.isr": 1,
    "transaction.state.log.num.partitions": 1,
    "group.initial.rebalance.delay.ms": 0,
    "share.coordinator.state.topic.replication.factor": 1,
    "share.coordinator.state.topic.min.isr": 1,
    "log.segment.bytes": 1073741824,
}

LOG4J2 = """\
Configuration:
  status: warn
  Appenders:
    File:
      name: file
      fileName: "{log}"
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: INFO
      AppenderRef:
        ref: file
"""


class KafkaStartError(RuntimeError):
    pass


def require_kafka() -> None:
    """Fail (never skip) when Kafka's jars or Java are missing: `make test` installs them."""
    if shutil.which("java") is None:
        pytest.fail("no `java` on PATH: Apache Kafka needs Java 17")
    if not (KAFKA_DEPS / ".installed").exists():
        pytest.fail(f"Apache Kafka not installed in {KAFKA_DEPS} (run `make kafka-deps`)")


def classpath() -> str:
    return f"{KAFKA_DEPS}/*"


def random_cluster_id() -> str:
    """A Kafka cluster id: a random UUID in URL-safe base64 without padding (22 characters), never
    starting with "-" (as Kafka's Uuid.randomUuid: `kafka-storage format -t -abc` reads it as an
    option and fails)."""
    while (found := base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")).startswith("-"):
        pass
    return found


def properties_text(props: dict[str, object]) -> str:
    def text(v: object) -> str:
        return str(v).lower() if isinstance(v, bool) else str(v)

    return "".join(f"{k}={text(v)}\n" for k, v in props.items())


class KafkaNode:
    """One Apache Kafka KRaft combined node: its config, data dir and log under one work dir."""

    def __init__(
        self,
        workdir: Path,
        overrides: dict[str, object] | None = None,
        node_id: int = 1,
        jvm_opts: list[str] | None = None,
        cluster_id: str | None = None,
    ) -> None:
        self.jvm_opts = JVM_OPTS if jvm_opts is None else jvm_opts
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.node_id = node_id
        self.port = free_port()
        self.controller_port = free_port()
        self.data_dir = workdir / "data"
        self.config_path = workdir / "server.properties"
        self.log_path = workdir / "kafka.log"
        self.cluster_id = cluster_id or random_cluster_id()
        self.config: dict[str, object] = {
            "process.roles": "broker,controller",
            "node.id": node_id,
            "controller.quorum.voters": self.voter,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            **NODE_DEFAULTS,
        }
        self.config.update(overrides or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.brokers_expected = 1  # start-up ends when Metadata lists this many brokers

    @property
    def voter(self) -> str:
        """This node's entry of controller.quorum.voters."""
        return f"{self.node_id}@127.0.0.1:{self.controller_port}"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def partition_dir(self, topic: str, partition: int = 0) -> Path:
        return self.data_dir / f"{topic}-{partition}"

    def _java(self, main_class: str, *args: str, opts: list[str]) -> list[str]:
        log4j = self.workdir / "log4j2.yaml"
        return ["java", *opts, f"-Dlog4j2.configurationFile={log4j}", "-cp", classpath(), main_class, *args]

    def _write_config(self) -> None:
        self.config_path.write_text(properties_text(self.config))
        (self.workdir / "log4j2.yaml").write_text(LOG4J2.format(log=self.log_path))

    def format_storage(self) -> None:
        cmd = self._java(
            "kafka.tools.StorageTool",
            "format",
            "-t",
            self.cluster_id,
            "-c",
            str(self.config_path),
            "--ignore-formatted",
            opts=TOOL_JVM_OPTS,
        )
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=self.workdir)
        if done.returncode != 0:
            raise KafkaStartError(f"kafka-storage format failed: {done.stdout}{done.stderr}")

    def start(self, timeout: float = START_TIMEOUT_S) -> KafkaNode:
        self.spawn()
        self.wait_ready(timeout)
        return self

    def spawn(self) -> None:
        """Format the storage and start the process; not yet ready (see `start`)."""
        require_kafka()
        self._write_config()
        self.format_storage()
        with open(self.workdir / "kafka.out", "ab") as out:
            self.proc = subprocess.Popen(
                self._java("kafka.Kafka", str(self.config_path), opts=self.jvm_opts),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env={**os.environ, "LOG_DIR": str(self.workdir)},
            )

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        assert self.proc is not None
        while time.monotonic() < deadline:
            if (code := self.proc.poll()) is not None:
                self.proc = None
                raise KafkaStartError(f"kafka exited with code {code} during start-up\n{self.log_tail()}")
            if self._serves_metadata():
                return
            time.sleep(0.1)
        self.stop()
        raise KafkaStartError(
            f"kafka did not answer Metadata on {self.bootstrap} within {timeout}s\n{self.log_tail()}"
        )

    def _serves_metadata(self) -> bool:
        from tests.integration.wire import WireClient

        try:
            with WireClient(self.port, timeout=2.0) as c:
                brokers = c.metadata(None, version=12).brokers
        except (OSError, AssertionError, ConnectionError):
            return False
        return any(b.node_id == self.node_id for b in brokers) and len(brokers) >= self.brokers_expected

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        if self.proc is not None:
            proc, self.proc = self.proc, None
            terminate(proc, timeout)

    def kill9(self) -> None:
        """SIGKILL, as a crash (a benchmark's failover); `start()` brings the node back."""
        if self.proc is not None:
            proc, self.proc = self.proc, None
            proc.kill()
            proc.wait()

    def log_tail(self, lines: int = 80) -> str:
        texts = []
        for path in (self.workdir / "kafka.out", self.log_path):
            if path.exists():
                texts.append("\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(texts)


@contextlib.contextmanager
def started_kafka(
    workdir: Path, overrides: dict[str, object] | None = None, jvm_opts: list[str] | None = None
) -> Iterator[KafkaNode]:
    node = KafkaNode(workdir, overrides, jvm_opts=jvm_opts)
    try:
        yield node.start()
    finally:
        node.stop()


class KafkaCluster:
    """Three KRaft nodes, each a broker and a voter of the one controller quorum, on free ports;
    each node's config, data and log4j2 output in `node-<id>/` of the work dir."""

    def __init__(
        self,
        workdir: Path,
        overrides: dict[str, object] | None = None,
        size: int = 3,
        jvm_opts: list[str] | None = None,
    ) -> None:
        cluster_id = random_cluster_id()
        replicated = {
            "default.replication.factor": size,
            "offsets.topic.replication.factor": size,
            "transaction.state.log.replication.factor": size,
            "transaction.state.log.min.isr": min(size, 2),
            "min.insync.replicas": min(size, 2),
            "share.coordinator.state.topic.replication.factor": size,
            "share.coordinator.state.topic.min.isr": min(size, 2),
        }
        self.nodes = [
            KafkaNode(workdir / f"node-{n}", {**replicated, **(overrides or {})}, n, jvm_opts, cluster_id)
            for n in range(1, size + 1)
        ]
        voters = ",".join(node.voter for node in self.nodes)
        for node in self.nodes:
            node.config["controller.quorum.voters"] = voters
            node.brokers_expected = size

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes)

    def start(self, timeout: float = START_TIMEOUT_S) -> KafkaCluster:
        """Start every node at once (a quorum needs a majority up), then wait until each one's
        Metadata answer lists every broker."""
        try:
            for node in self.nodes:
                node.spawn()
            deadline = time.monotonic() + timeout
            for node in self.nodes:
                node.wait_ready(max(1.0, deadline - time.monotonic()))
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM to every node at once; one still in its controlled shutdown after `timeout`
        (it waits for a quorum the others took away) is killed."""
        for node in self.nodes:
            if node.proc is not None:
                node.proc.terminate()
        for node in self.nodes:
            node.stop(timeout)

    def log_tails(self, lines: int = 20) -> str:
        return "\n".join(f"--- Kafka node {n.node_id} ---\n{n.log_tail(lines)}" for n in self.nodes)


@contextlib.contextmanager
def started_kafka_cluster(
    workdir: Path, overrides: dict[str, object] | None = None, jvm_opts: list[str] | None = None
) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster(workdir, overrides, jvm_opts=jvm_opts)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def kafka_tool(
    main_class: str, *args: str, timeout: float = 120, stdin: str | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run one of Kafka's CLI tools by its main class (what its bin/ script runs), text captured."""
    require_kafka()
    return subprocess.run(
        ["java", *TOOL_JVM_OPTS, "-Dlog4j2.level=WARN", "-cp", classpath(), main_class, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        input=stdin,
        cwd=cwd or REPO_ROOT,
    )
