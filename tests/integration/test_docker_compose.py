"""docker-compose.yml with a real Docker engine: build, `up --wait`, transactions from the host
through the published ports (confluent-kafka), the broker that leads both a data partition
and the transaction coordinator's partition killed with `docker kill` (SIGKILL) while a
transactional producer runs, restarted, and exactly-once checked with a read_committed
reader; `down -v` at the end. Then docker-compose.secure.yml, the secured variant (its own
project, ports and volumes, the same images): an admin transaction over SASL_SSL with the
SCRAM credentials and the CA its `init` made, a wrong password and a client without the CA
refused, `init` recreated keeping the CA and the users.

The engine and images come from tests/integration/docker_engine.py (`make docker-deps`):
the images are built from the repository's Dockerfiles on a local debootstrap base passed
through their `BASE` build argument. Waits are short by configuration (a 2 s broker
session, 5 internal partitions) in a compose override file of the test's own.
"""

from __future__ import annotations

import json
import random
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from protocol.messages import REQUESTS
from tests.integration.clients import read_to_eof
from tests.integration.docker_engine import (
    ROOT,
    compose_command,
    compose_env,
    import_base_image,
    local_ca_certs,
    running_engine,
)
from tests.integration.harness import wait_until
from tests.integration.wire import WireClient

pytestmark = pytest.mark.integration

BROKERS = (1, 2, 3)
BROKER_SERVICES = tuple(f"broker-{n}" for n in BROKERS)
INTERNAL_PARTITIONS = 5
FIND_COORDINATOR = 10
TEST_SETTINGS = {  # every broker: failover in seconds, small internal topics
    "GREGOR_OVERRIDE_BROKER_SESSION_TIMEOUT_MS": "2000",
    "GREGOR_OVERRIDE_REPLICA_LAG_TIME_MAX_MS": "2000",
    "GREGOR_OVERRIDE_TRANSACTION_STATE_LOG_NUM_PARTITIONS": str(INTERNAL_PARTITIONS),
    "GREGOR_OVERRIDE_OFFSETS_TOPIC_NUM_PARTITIONS": str(INTERNAL_PARTITIONS),
}


@dataclass
class ComposeCluster:
    project: str
    env: dict[str, str]
    files: list[Path]
    ports: dict[int, int]  # node id -> published (and advertised) port
    metrics_ports: dict[int, int]

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.ports[n]}" for n in BROKERS)

    def compose(self, *args: str, timeout: float = 300, check: bool = True) -> str:
        files = [a for f in self.files for a in ("-f", str(f))]
        done = subprocess.run([*compose_command(), *files, "-p", self.project, *args], cwd=ROOT,
                              env=self.env, capture_output=True, text=True, timeout=timeout)
        if check:
            output = done.stdout[-3000:] + done.stderr[-3000:]
            assert done.returncode == 0, f"compose {' '.join(args)}: {output}"
        return done.stdout

    def container(self, service: str) -> str:
        return self.compose("ps", "-a", "-q", service).strip()

    def state(self, service: str) -> dict[str, Any]:
        out = subprocess.run(["docker", "inspect", self.container(service)], capture_output=True, text=True,
                             check=True).stdout
        return dict(json.loads(out)[0]["State"])

    def logs(self, service: str, lines: int = 30) -> str:
        return self.compose("logs", "--no-color", "--tail", str(lines), service, check=False)

    def up(self, *services: str) -> None:
        """`up -d --wait`; if it fails, the failure names what `services` logged and their last
        health checks' output, then compose's own message (last: a CI log keeps the tail)."""
        try:
            self.compose("up", "-d", "--wait", "--wait-timeout", "120", timeout=180)
        except AssertionError as exc:
            raise AssertionError("\n".join([*map(self.explain, services), str(exc)])) from None

    def explain(self, service: str) -> str:
        health = self.state(service).get("Health") or {}
        checks = [f"{c.get('ExitCode')}: {c.get('Output', '').strip()}" for c in health.get("Log", [])]
        return "\n".join([f"{service}'s log:", self.logs(service), f"{service}'s health checks:", *checks])


def ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (ip_local_port_range)."""
    return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


def host_ports(count: int) -> list[int]:
    """`count` loopback ports free now, taken below the kernel's ephemeral range: Docker binds
    them only when the containers start, and a port inside that range can be taken meanwhile by
    any test's outgoing connection (each gets a local port from it) or by a bind to port 0."""
    span = range(20000, ephemeral_low())
    found: list[int] = []
    for port in random.sample(span, len(span)):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        found.append(port)
        if len(found) == count:
            return found
    pytest.fail(f"no {count} free ports in {span}")


def override_file(path: Path) -> Path:
    services = {f"broker-{n}": {"environment": TEST_SETTINGS} for n in BROKERS}
    path.write_text(json.dumps({"services": services}))  # JSON is YAML
    return path


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """An engine with both images built (through docker-compose.yml, once for the module); the
    build variables every compose file of the module is given."""
    tmp = tmp_path_factory.mktemp("engine")
    with running_engine(tmp / "dockerd.log"):
        base = import_base_image()
        build_env = {"GREGOR_BASE_IMAGE": base, "GREGOR_DEBIAN_IMAGE": base,
                     "GREGOR_EXTRA_CA_CERTS": local_ca_certs()}
        builder = ComposeCluster(f"gregor-it-build-{uuid.uuid4().hex[:6]}", compose_env(**build_env),
                                 [ROOT / "docker-compose.yml"], {}, {})
        builder.compose("build", timeout=600)
        yield build_env


@pytest.fixture(scope="module")
def cluster(images: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeCluster]:
    tmp = tmp_path_factory.mktemp("compose")
    chosen = host_ports(2 * len(BROKERS))
    ports = dict(zip(BROKERS, chosen[:3], strict=True))
    metrics_ports = dict(zip(BROKERS, chosen[3:], strict=True))
    env = compose_env(
        **images,
        **{f"GREGOR_BROKER_{n}_PORT": str(p) for n, p in ports.items()},
        **{f"GREGOR_METRICS_{n}_PORT": str(p) for n, p in metrics_ports.items()},
    )
    files = [ROOT / "docker-compose.yml", override_file(tmp / "test-settings.yml")]
    c = ComposeCluster(f"gregor-it-{uuid.uuid4().hex[:6]}", env, files, ports, metrics_ports)
    try:
        c.up(*BROKER_SERVICES)
        yield c
    finally:
        c.compose("down", "-v", "--timeout", "10", check=False)


def test_up_creates_the_example_topics_across_three_brokers(cluster: ComposeCluster) -> None:
    # `up --wait` returned once the topics service was healthy: the topics exist already
    assert cluster.state("topics")["Health"]["Status"] == "healthy", cluster.logs("topics")
    metadata = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=20)
    assert set(metadata.brokers) == set(BROKERS)
    assert {b.port for b in metadata.brokers.values()} == set(cluster.ports.values())
    for name in ("orders", "payments"):
        partitions = metadata.topics[name].partitions.values()
        assert len(partitions) == 3 and {p.leader for p in partitions} == set(BROKERS)
        assert all(sorted(p.replicas) == list(BROKERS) for p in partitions)
    for n in BROKERS:
        assert cluster.state(f"broker-{n}")["Health"]["Status"] == "healthy"
        with urllib.request.urlopen(f"http://127.0.0.1:{cluster.metrics_ports[n]}/metrics", timeout=10) as r:
            assert b"kafka_network_requestmetrics_requests_total" in r.read()



def test_up_wait_again_exits_0_once_everything_runs(cluster: ComposeCluster) -> None:
    """A second `up -d --wait` on the running cluster (images built, topics created) exits 0:
    no service of the file has exited, so the wait has nothing to fail on."""
    cluster.up(*BROKER_SERVICES)  # asserts exit 0
    assert cluster.state("topics")["Status"] == "running"

# -- exactly once through a docker kill ------------------------------------------------------


def create_topic(cluster: ComposeCluster) -> str:
    topic = f"eos-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(30)
    wait_until(lambda: len(leaders(cluster, topic)) == 3, timeout=30, msg=f"leaders of {topic}")
    return topic


def leaders(cluster: ComposeCluster, topic: str) -> dict[int, int]:
    """partition -> leader node id, from Metadata."""
    metadata = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(topic, timeout=20)
    return {i: p.leader for i, p in metadata.topics[topic].partitions.items() if p.leader > 0}


def transaction_coordinator(cluster: ComposeCluster, tid: str, via: int = 1) -> int:
    """FindCoordinator (key type 1) sent to broker `via` until answered: the node id of the
    transaction coordinator."""
    find = REQUESTS[FIND_COORDINATOR](version=3, key=tid, key_type=1)
    with WireClient(cluster.ports[via]) as c:
        answer = wait_until(lambda: (r := c.call(find, 3)).error_code == 0 and r, timeout=30,
                            msg=f"coordinator of {tid}")
    return int(answer.node_id)


@dataclass
class TransactionLoop:
    """A transactional producer committing 9-record transactions over 3 partitions until stopped;
    an abortable error aborts the transaction (its records must never be read)."""

    bootstrap: str
    topic: str
    tid: str
    committed: list[str] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)
    commit_times: list[float] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            self.errors.append(exc)

    def _run(self) -> None:
        p = Producer({
            "bootstrap.servers": self.bootstrap, "transactional.id": self.tid,
            "transaction.timeout.ms": 30000, "linger.ms": 5,
            "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500, "retry.backoff.ms": 50,
        })
        p.init_transactions(60)
        n = 0
        while not self.stop.is_set():
            values = [f"{self.tid}-{n}-{i}" for i in range(9)]
            self._one(p, values)
            n += 1

    def _one(self, p: Producer, values: list[str]) -> None:
        p.begin_transaction()
        try:
            for i, v in enumerate(values):
                p.produce(self.topic, v.encode(), partition=i % 3)
            _retrying(lambda: p.commit_transaction(30))
        except KafkaException as exc:
            if not exc.args[0].txn_requires_abort():
                raise
            _retrying(lambda: p.abort_transaction(30))
            self.aborted.extend(values)
            return
        self.committed.extend(values)
        self.commit_times.append(time.monotonic())

    def commits_after(self, moment: float) -> int:
        return sum(1 for t in list(self.commit_times) if t > moment)


def _retrying(call: Any) -> None:
    """A commit or abort repeated while it fails with a retriable error (as the clients document)."""
    while True:
        try:
            call()
            return
        except KafkaException as exc:
            if not exc.args[0].retriable():
                raise


def wait_commits(loop: TransactionLoop, since: float, count: int, what: str) -> float:
    wait_until(lambda: loop.errors or loop.commits_after(since) >= count, timeout=90,
               interval=0.1, msg=f"{count} commits {what}")
    assert not loop.errors, f"producer failed {what}: {loop.errors[0]!r}"
    return min(t for t in loop.commit_times if t > since)


def assert_lso_caught_up(cluster: ComposeCluster, topic: str) -> None:
    """No transaction left open: read_committed and read_uncommitted see the same partition ends."""
    def ends(isolation: str) -> list[int]:
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"w-{uuid.uuid4().hex[:6]}",
                      "isolation.level": isolation})
        try:
            return [c.get_watermark_offsets(TopicPartition(topic, i), timeout=20, cached=False)[1]
                    for i in range(3)]
        finally:
            c.close()

    wait_until(lambda: ends("read_committed") == ends("read_uncommitted"), timeout=30, interval=0.2,
               msg=f"LSO of {topic} reaching the high watermark")


def test_exactly_once_through_a_docker_kill_of_the_coordinator_and_leader(cluster: ComposeCluster) -> None:
    topic = create_topic(cluster)
    tid = f"eos-{uuid.uuid4().hex[:8]}"
    victim = transaction_coordinator(cluster, tid)
    assert victim in leaders(cluster, topic).values(), "the coordinator also leads a data partition"
    service = f"broker-{victim}"

    loop = TransactionLoop(cluster.bootstrap, topic, tid)
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    try:
        wait_commits(loop, 0, 5, "before the kill")
        subprocess.run(["docker", "kill", cluster.container(service)], check=True, capture_output=True)
        killed_at = time.monotonic()
        first_after = wait_commits(loop, killed_at, 5, f"with {service} killed")
        state = cluster.state(service)
        assert not state["Running"] and state["ExitCode"] == 137, state
        new = transaction_coordinator(cluster, tid, via=next(n for n in BROKERS if n != victim))
        assert new != victim and victim not in leaders(cluster, topic).values()

        cluster.compose("start", service)
        wait_until(lambda: cluster.state(service)["Health"]["Status"] == "healthy", timeout=60,
                   interval=0.5, msg=f"{service} healthy again")
        wait_commits(loop, time.monotonic(), 5, f"with {service} back")
    finally:
        loop.stop.set()
        thread.join(90)
    assert not thread.is_alive() and not loop.errors, loop.errors

    assert_lso_caught_up(cluster, topic)
    read = [m.value().decode() for _, m in read_to_eof(
        cluster.bootstrap, [(topic, i) for i in range(3)], "read_committed", "eos", 60, topic)]
    assert len(read) == len(set(read)), "a committed record read twice"
    missing, unexpected = set(loop.committed) - set(read), set(read) - set(loop.committed)
    assert not missing, f"committed but not read: {sorted(missing)[:5]}"
    assert not unexpected, f"read but never committed: {sorted(unexpected)[:5]}"
    assert not set(read) & set(loop.aborted)
    print(f"{service} killed: {len(loop.committed) // 9} transactions committed, "
          f"{len(loop.aborted) // 9} aborted; first commit {first_after - killed_at:.1f} s after the kill; "
          f"coordinator {victim} -> {new}")


def test_sigterm_stops_a_broker_cleanly(cluster: ComposeCluster) -> None:
    """`compose stop`: SIGTERM reaches the broker (init, exec form), which shuts down cleanly and
    comes back healthy with its data."""
    cluster.compose("stop", "--timeout", "30", "broker-2")
    state = cluster.state("broker-2")
    assert not state["Running"] and state["ExitCode"] == 0, state
    assert "broker 2 stopped cleanly" in cluster.logs("broker-2", 20)
    cluster.compose("start", "broker-2")
    wait_until(lambda: cluster.state("broker-2")["Health"]["Status"] == "healthy", timeout=60,
               interval=0.5, msg="broker-2 healthy again")
    metadata = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics("orders", timeout=20)
    assert 2 in metadata.brokers


# -- the secured variant: docker-compose.secure.yml ----------------------------------------------

ADMIN_PASSWORD = f"admin-{uuid.uuid4().hex[:8]}"  # through GREGOR_ADMIN_PASSWORD, not the default


@dataclass
class SecureCluster:
    compose: ComposeCluster
    ca: Path  # the CA certificate copied out of the `secrets` volume

    def client(self, **conf: Any) -> dict[str, Any]:
        """A confluent-kafka client's settings: SASL_SSL as admin, trusting the compose CA."""
        return {"bootstrap.servers": self.compose.bootstrap, "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "admin", "sasl.password": ADMIN_PASSWORD,
                "ssl.ca.location": str(self.ca), **conf}


@pytest.fixture(scope="module")
def secure(images: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureCluster]:
    """docker-compose.secure.yml up (its own project, ports and volumes), the images of `images`."""
    tmp = tmp_path_factory.mktemp("compose-secure")
    chosen = host_ports(2 * len(BROKERS))
    ports = dict(zip(BROKERS, chosen[:3], strict=True))
    metrics_ports = dict(zip(BROKERS, chosen[3:], strict=True))
    env = compose_env(
        **images, GREGOR_ADMIN_PASSWORD=ADMIN_PASSWORD,
        **{f"GREGOR_BROKER_{n}_PORT": str(p) for n, p in ports.items()},
        **{f"GREGOR_METRICS_{n}_PORT": str(p) for n, p in metrics_ports.items()},
    )
    files = [ROOT / "docker-compose.secure.yml", override_file(tmp / "test-settings.yml")]
    c = ComposeCluster(f"gregor-it-sec-{uuid.uuid4().hex[:6]}", env, files, ports, metrics_ports)
    try:
        c.up("init", *BROKER_SERVICES)
        c.compose("cp", "init:/etc/gregor/secrets/ca.pem", str(tmp / "ca.pem"))  # as docs/cluster.md says
        yield SecureCluster(c, tmp / "ca.pem")
        logs = c.compose("logs", "--no-color", check=False)
        assert "Traceback" not in logs, logs[-3000:]
    finally:
        c.compose("down", "-v", "--timeout", "10", check=False)


def test_secured_cluster_serves_an_admin_transaction_over_sasl_ssl(secure: SecureCluster) -> None:
    """The admin bootstrapped with SCRAM, trusting the generated CA: metadata (the example topics
    the `topics` service created as admin), a new topic, a committed transaction read back
    read_committed; every broker-to-broker step (replication, markers) over SASL_SSL too."""
    admin = AdminClient(secure.client())
    metadata = admin.list_topics(timeout=30)
    assert set(metadata.brokers) == set(BROKERS)
    assert {b.port for b in metadata.brokers.values()} == set(secure.compose.ports.values())
    assert {"orders", "payments"} <= set(metadata.topics)
    topic = f"secure-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(30)

    producer = Producer(secure.client(**{"transactional.id": f"tx-{topic}"}))
    producer.init_transactions(60)
    producer.begin_transaction()
    values = [f"v{i}".encode() for i in range(30)]
    for i, v in enumerate(values):
        producer.produce(topic, v, partition=i % 3)
    producer.commit_transaction(60)

    consumer = Consumer(secure.client(**{"group.id": f"g-{topic}", "isolation.level": "read_committed",
                                         "enable.auto.commit": False}))
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(3)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < len(values) and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        consumer.close()
    assert sorted(got) == sorted(values)
    isr = AdminClient(secure.client()).list_topics(topic, timeout=20).topics[topic].partitions.values()
    assert all(len(p.isrs) == 3 for p in isr), "followers fetch over SASL_SSL as User:broker"
    assert shutil.which("kcat"), "kcat is missing: `make test` installs it (scripts/chaos-deps.sh)"
    listed = subprocess.run(  # docs/cluster.md's kcat line
        ["kcat", "-b", secure.compose.bootstrap, "-X", "security.protocol=sasl_ssl",
         "-X", "sasl.mechanisms=SCRAM-SHA-512", "-X", "sasl.username=admin",
         "-X", f"sasl.password={ADMIN_PASSWORD}", "-X", f"ssl.ca.location={secure.ca}",
         "-L", "-t", topic, "-m", "30"],
        capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and f'topic "{topic}" with 3 partitions' in listed.stdout, listed


def refusal(conf: dict[str, Any], code: int) -> KafkaError:
    """The first error of kind `code` librdkafka reports to a producer that cannot get through."""
    errors: list[KafkaError] = []
    producer = Producer({**conf, "error_cb": errors.append})

    def arrived() -> list[KafkaError]:
        producer.poll(0.1)
        return [e for e in errors if e.code() == code]

    return wait_until(arrived, timeout=30, msg=f"librdkafka error {code}")[0]


def test_secured_cluster_refuses_a_wrong_password_and_an_untrusting_client(secure: SecureCluster) -> None:
    wrong = refusal(secure.client(**{"sasl.password": "not-the-password"}), KafkaError._AUTHENTICATION)
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in wrong.str(), wrong
    untrusting = secure.client()
    del untrusting["ssl.ca.location"]  # the system's CAs: none signed the compose CA
    assert "certificate verify failed" in refusal(untrusting, KafkaError._SSL).str()


def test_secured_cluster_up_again_keeps_its_certificates_and_users(secure: SecureCluster) -> None:
    """`up --wait` exits 0 again; `init` recreated keeps the CA, the keystores and the users."""
    c = secure.compose
    c.up("init", *BROKER_SERVICES)
    c.compose("up", "-d", "--wait", "--wait-timeout", "60", "--no-deps", "--force-recreate", "init",
              timeout=120)
    again = secure.ca.with_name("ca-again.pem")
    c.compose("cp", "init:/etc/gregor/secrets/ca.pem", str(again))
    assert again.read_bytes() == secure.ca.read_bytes()
    logs = c.logs("init", 20)
    assert "kept the SCRAM users stored on the first start: broker admin" in logs, logs
    assert "made" not in logs, logs
    assert set(AdminClient(secure.client()).list_topics(timeout=20).brokers) == set(BROKERS)
