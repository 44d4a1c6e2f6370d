"""Kafka Connect 4.3.1 with exactly-once source support (KIP-618) running MirrorMaker 2's
MirrorSourceConnector under kill -9, from one Gregor broker to Gregor's three brokers and from one
Apache Kafka node to Kafka's three nodes: the same worker, the same faults, the same checks.

A transactional producer fills `orders` (two partitions) on the source cluster `src` (one broker)
with committed and aborted transactions mixed; each value is a unique id. One distributed worker
(`ConnectDistributed`, jars from `make connect-deps`, `exactly.once.source.support=enabled`) on
the target cluster `dst` (three brokers: its config/offset/status topics and the tasks'
transactions there) runs the connector with `exactly.once.support=required` and a read_committed
source consumer, copying `orders` to `src.orders` on the target. The worker is killed with kill -9
while it copies, three times, and restarted: each task's producer fences the one before it by
its transactional id (InitProducerId aborts the open transaction); at the second kill the broker
leading `src.orders-0` is killed with kill -9 too and restarted. Then the connector is
reconfigured from two tasks to one: before the new generation runs, the leader fences the old
one out (Admin.fenceProducers, a round of InitProducerId on both old ids). Then, read back
read_committed:

- `src.orders` partition by partition equals `orders` (MM2 keeps partitions and order): every
  committed record once, none aborted (the producer's own list of committed and aborted ids);
- the source offsets Connect keeps for the connector (GET `/connectors/NAME/offsets`) name each
  partition's last record copied;
- a group that read half of each partition of `orders` on the source gets offsets on
  `src.orders` on the target from MirrorCheckpointConnector (translated through MM2's offset
  syncs; how far they reach depends on the syncs MM2 kept, on either broker); moved over (a
  consumer of the group on the target), it reads every record it had not read, in order;

and what Connect asked of the brokers, the same on both: its internal topics (on the target) and
MM2's offset-syncs topic (on the source) compacted, one partition of the config topic, the source
topic's configs copied to the copy (DescribeConfigs, IncrementalAlterConfigs), a transactional id
per task and the leader's own for the config topic, the fenced task's left Empty
(ListTransactions)."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, OFFSET_STORED, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic

from tests.integration.eos_targets import (
    KAFKA_FAILOVER,
    NAMES,
    Target,
    kills,
    leader_of,
    one_broker,
    tally,
    three_brokers,
)
from tests.integration.harness import REPO_ROOT, free_port, wait_until
from tests.integration.kafka import properties_text
from tests.integration.wire import WireClient

CONNECT_DEPS = REPO_ROOT / ".deps" / "connect"  # scripts/kafka/connect-pom.xml
GROUP = "connect-eos"  # the workers' group.id
CONNECTOR = "mirror-source"
SOURCE = "orders"
TARGET = f"src.{SOURCE}"  # DefaultReplicationPolicy: the source alias, a dot, the topic
PARTITIONS = 2
TASKS = 2
INTERNAL = {"config": "connect-configs", "offset": "connect-offsets", "status": "connect-status"}
OFFSET_SYNCS = "mm2-offset-syncs.dst.internal"  # MM2's own, on the source alias
# Set on the source topic; MM2 copies a topic's non-default configs (DescribeConfigs) to its copy.
SOURCE_CONFIGS = {"retention.ms": "604800001", "max.message.bytes": "2000000"}
KILLS = kills(3, least=2)  # a broker killed at the second; `make eos-apps`: EOS_KILLS
SEED = 618
CHECKPOINT = "mirror-checkpoint"
GROUP_ON_SOURCE = "shop"  # a consumer group of `orders` that moves over to `src.orders`

BROKER_CONFIG: dict[str, object] = {
    "offsets.topic.num.partitions": 2,
    "transaction.state.log.num.partitions": 2,
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000,
}
KAFKA_CONFIG = {**BROKER_CONFIG, **KAFKA_FAILOVER}
JVM = ["-Xms64m", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
       "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
       "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.clients=warn",
       "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.common=warn",
       "-Dorg.slf4j.simpleLogger.log.org.eclipse.jetty=warn",
       "-Dorg.slf4j.simpleLogger.log.org.glassfish=warn",
       "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.connect.runtime.Worker=debug",
       "-Dorg.slf4j.simpleLogger.showDateTime=true"]


def worker_config(bootstrap: str, rest_port: int) -> dict[str, object]:
    """The worker's properties: exactly-once source support on, the internal topics replicated to
    all three brokers, a dead worker's session over in 2 s, lost tasks reassigned at once."""
    return {
        "bootstrap.servers": bootstrap,
        "group.id": GROUP,
        "exactly.once.source.support": "enabled",
        "config.storage.topic": INTERNAL["config"],
        "offset.storage.topic": INTERNAL["offset"],
        "status.storage.topic": INTERNAL["status"],
        "config.storage.replication.factor": 3,
        "offset.storage.replication.factor": 3,
        "status.storage.replication.factor": 3,
        "offset.storage.partitions": 2,
        "status.storage.partitions": 2,
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "listeners": f"http://127.0.0.1:{rest_port}",
        "rest.advertised.host.name": "127.0.0.1",
        "rest.advertised.port": rest_port,
        "plugin.discovery": "service_load",  # MM2's jars declare their connectors
        "session.timeout.ms": 2000,
        "heartbeat.interval.ms": 500,
        "scheduled.rebalance.max.delay.ms": 0,
        "offset.flush.interval.ms": 500,
        # A killed task's open transaction holds back the offsets topic's last stable offset, which
        # a starting worker reads up to before it joins (and fences the task): a short timeout
        # ends it soon (60 s by default).
        "producer.transaction.timeout.ms": 5000,
    }


def connector_config(clusters: Clusters, tasks: int) -> dict[str, str]:
    """MirrorSourceConnector from cluster src to cluster dst, exactly once."""
    return {
        "connector.class": "org.apache.kafka.connect.mirror.MirrorSourceConnector",
        "tasks.max": str(tasks),
        "source.cluster.alias": "src",
        "target.cluster.alias": "dst",
        "source.cluster.bootstrap.servers": clusters.source,
        "target.cluster.bootstrap.servers": clusters.target.bootstrap,
        "topics": SOURCE,
        "key.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
        "value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
        "exactly.once.support": "required",
        "transaction.boundary": "poll",
        "source.consumer.isolation.level": "read_committed",  # aborted records stay behind
        "replication.factor": "3",
        "offset-syncs.topic.replication.factor": "1",  # on the source's one broker
        "refresh.topics.interval.ms": "1000",
        "sync.topic.acls.enabled": "false",
    }


def checkpoint_config(clusters: Clusters) -> dict[str, str]:
    """MirrorCheckpointConnector for the group GROUP_ON_SOURCE: its offsets on `orders` translated
    (through MM2's offset syncs) to `src.orders` and written into the group on the target."""
    return {
        "connector.class": "org.apache.kafka.connect.mirror.MirrorCheckpointConnector",
        "tasks.max": "1",
        "source.cluster.alias": "src",
        "target.cluster.alias": "dst",
        "source.cluster.bootstrap.servers": clusters.source,
        "target.cluster.bootstrap.servers": clusters.target.bootstrap,
        "groups": GROUP_ON_SOURCE,
        "topics": SOURCE,
        "key.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
        "value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
        "emit.checkpoints.interval.seconds": "1",
        "sync.group.offsets.enabled": "true",
        "sync.group.offsets.interval.seconds": "1",
        "refresh.groups.interval.seconds": "1",
        "checkpoints.topic.replication.factor": "3",
    }


@dataclass(frozen=True)
class Outcome:
    """What a run leaves for the comparison of both brokers."""

    topic_configs: dict[str, dict[str, str]]  # topic -> the configs Connect and MM2 set
    transactions: dict[str, str]  # transactional id -> its state at the end


OUTCOMES: dict[str, Outcome] = {}


@dataclass(frozen=True)
class Clusters:
    """The two clusters of one kind MM2 copies between."""

    source: str  # one broker's bootstrap
    target: Target  # three brokers, the worker's own cluster


@pytest.fixture(params=NAMES)
def clusters(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Clusters]:
    with (one_broker(request.param, tmp_path / "source", BROKER_CONFIG) as source,
          three_brokers(request.param, tmp_path, BROKER_CONFIG, KAFKA_CONFIG) as target):
        yield Clusters(source, target)


@pytest.fixture(scope="module")
def connect_deps() -> Path:
    """The worker's jars (fails, never skips, without them)."""
    if not (CONNECT_DEPS / ".installed").exists():
        pytest.fail(f"Kafka Connect not installed in {CONNECT_DEPS} (run `make connect-deps`)")
    return CONNECT_DEPS


class Worker:
    """One ConnectDistributed process: its properties file and its output under `workdir`; the
    same REST port at every start."""

    def __init__(self, bootstrap: str, jars: Path, workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.out = workdir / "worker.out"
        props = workdir / "worker.properties"
        props.write_text(properties_text(worker_config(bootstrap, self.port)))
        self.command = ["java", *JVM, "-cp", f"{jars}/*", "org.apache.kafka.connect.cli.ConnectDistributed",
                        str(props)]
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        with open(self.out, "ab") as out:
            out.write(f"===== start #{self.starts}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, cwd=self.workdir)

    def alive(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, self.tail()
        return True

    def rest(self, method: str, path: str, body: object = None) -> tuple[int, object]:
        """One REST call: (status, parsed JSON answer); (0, reason) while nothing listens."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")
        except (OSError, ValueError) as e:
            return 0, str(e)

    def put_connector(self, config: dict[str, str], name: str = CONNECTOR) -> bool:
        """PUT a connector's config; False while the worker is not ready (a rebalance, start-up)."""
        self.alive()
        status, answer = self.rest("PUT", f"/connectors/{name}/config", config)
        # 404: REST is up, its resources not yet; 409: a rebalance; 500, 503: the herder starting
        assert status in (0, 200, 201, 404, 409, 500, 503), (status, answer)
        return status in (200, 201)

    def tasks_running(self, tasks: int) -> bool:
        self.alive()
        status, answer = self.rest("GET", f"/connectors/{CONNECTOR}/status")
        if status != 200 or not isinstance(answer, dict):
            return False
        states = [t["state"] for t in answer.get("tasks", [])]
        assert "FAILED" not in states and answer["connector"]["state"] != "FAILED", answer
        return len(states) == tasks and all(s == "RUNNING" for s in states)

    def fenced(self, tasks: int) -> bool:
        """The worker's log says it fenced out `tasks` task producers (Worker's DEBUG line)."""
        return f"Finished fencing out {tasks} task producers" in self.out.read_text(errors="replace")

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.proc = None

    def stop(self) -> None:
        """At the end: kill -9 too (nothing is left to check, and a graceful stop takes seconds)."""
        if self.proc is not None:
            self.kill9()

    def tail(self, lines: int = 60) -> str:
        text = self.out.read_text(errors="replace").splitlines()[-lines:]
        return f"--- Connect worker ({self.out}) ---\n" + "\n".join(text)


# -- the source: transactions committed and aborted -------------------------------------------


class TransactionalFeed:
    """Transactions of one to five records on `orders`, about a third of them aborted, on a thread
    until `stop()`; every value a unique id: `c<txn>-<i>` committed, `a<txn>-<i>` aborted."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "orders-feed",
                                  "linger.ms": 5})
        self.committed: list[str] = []
        self.aborted: list[str] = []
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="orders-feed")
        self.producer.init_transactions(30)
        self.thread.start()

    def _run(self) -> None:
        rng = random.Random(SEED)
        try:
            txn = 0
            while not self.done.is_set():
                txn += 1
                self._one(txn, rng.randint(1, 5), commit=rng.random() > 0.35)
                time.sleep(0.02)
        except BaseException as e:
            self.error = e

    def _one(self, txn: int, n: int, commit: bool) -> None:
        kind = "c" if commit else "a"
        values = [f"{kind}{txn}-{i}" for i in range(n)]
        self.producer.begin_transaction()
        for v in values:
            self.producer.produce(SOURCE, v.encode(), key=v.encode())
        if commit:
            self.producer.commit_transaction(30)
            self.committed.extend(values)
        else:
            assert self.producer.flush(30) == 0  # the aborted records in the log, not just dropped
            self.producer.abort_transaction(30)
            self.aborted.extend(values)

    def stop(self) -> None:
        self.done.set()
        self.thread.join()
        if self.error is not None:
            raise self.error


# -- reading back ------------------------------------------------------------------


def read_committed(
    bootstrap: str, topic: str, timeout: float = 30, group: str | None = None
) -> dict[int, list[str]]:
    """Per partition the values of its committed records, in offset order (from `group`'s
    committed offsets: read_records)."""
    found = read_records(bootstrap, topic, timeout, group)
    return {p: [v for _o, v in records] for p, records in found.items()}


def read_records(
    bootstrap: str, topic: str, timeout: float = 30, group: str | None = None
) -> dict[int, list[tuple[int, str]]]:
    """Per partition the (offset, value) of its committed records, in offset order: all of them,
    or as `group` reads them, from its committed offsets."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group or f"check-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "enable.partition.eof": True,
                  "isolation.level": "read_committed", "fetch.wait.max.ms": 50})
    try:
        start = OFFSET_STORED if group else OFFSET_BEGINNING
        c.assign([TopicPartition(topic, p, start) for p in range(PARTITIONS)])
        got: dict[int, list[tuple[int, str]]] = {p: [] for p in range(PARTITIONS)}
        at_eof: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(at_eof) < PARTITIONS:
            assert time.monotonic() < deadline, f"{topic}: no end of partitions {at_eof} within {timeout}s"
            msg = c.poll(0.2)
            if msg is None:
                continue
            p = int(msg.partition() or 0)
            if (err := msg.error()) is not None:
                assert err.code() == KafkaError._PARTITION_EOF, err
                at_eof.add(p)
                continue
            at_eof.discard(p)
            got[p].append((int(msg.offset() or 0), bytes(msg.value() or b"").decode()))
        return got
    finally:
        c.close()


def committed_ends(bootstrap: str, topic: str) -> int:
    """The sum of the topic's last stable offsets (0 while it does not exist)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "ends", "isolation.level": "read_committed"})
    try:
        if topic not in c.list_topics(topic, timeout=10).topics or c.list_topics(topic).topics[topic].error:
            return 0
        ends = [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in range(PARTITIONS)]
        return sum(high for _low, high in ends)
    except Exception:  # the topic not yet served everywhere
        return 0
    finally:
        c.close()


def mirrored(bootstrap: str, source: dict[int, list[str]]) -> bool:
    return {p: len(v) for p, v in read_committed(bootstrap, TARGET).items()} == {
        p: len(v) for p, v in source.items()}


# -- what Connect asked of the broker --------------------------------------------------


def dynamic_configs(admin: AdminClient, topics: list[str]) -> dict[str, dict[str, str]]:
    """The configs set on each topic (DescribeConfigs, source DYNAMIC_TOPIC_CONFIG)."""
    futures = admin.describe_configs([ConfigResource("topic", t) for t in topics])
    out = {}
    for resource, f in futures.items():
        entries = f.result(15).values()
        out[resource.name] = {e.name: str(e.value) for e in entries
                              if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}
    return out


def list_transactions(bootstrap: str) -> dict[str, str]:
    """The transactional ids every broker's coordinator lists, with their states (ListTransactions
    v0, no filters)."""
    from protocol.messages import REQUESTS

    found: dict[str, str] = {}
    for address in bootstrap.split(","):
        with WireClient(int(address.rsplit(":", 1)[1])) as c:
            resp = c.call(REQUESTS[66](version=0, state_filters=[], producer_id_filters=[]), 0)
        assert resp.error_code == 0, resp
        found.update((s.transactional_id, s.transaction_state) for s in resp.transaction_states)
    return found


def _settled(states: dict[str, str]) -> dict[str, str] | None:
    return None if any(state.startswith("Prepare") for state in states.values()) else states


def check_broker_side(clusters: Clusters) -> Outcome:
    """The target: Connect's internal topics, the copy's configs, the transactional ids; the
    source: MM2's offset syncs topic."""
    admin = AdminClient({"bootstrap.servers": clusters.target.bootstrap})
    topics = admin.list_topics(timeout=10).topics
    assert len(topics[INTERNAL["config"]].partitions) == 1, "KIP-618: the config topic has one partition"
    configs = dynamic_configs(admin, [*sorted(INTERNAL.values()), TARGET])
    configs |= dynamic_configs(AdminClient({"bootstrap.servers": clusters.source}), [OFFSET_SYNCS])
    for name in [*INTERNAL.values(), OFFSET_SYNCS]:
        assert configs[name].get("cleanup.policy") == "compact", (name, configs[name])
    for key, value in SOURCE_CONFIGS.items():
        assert configs[TARGET].get(key) == value, configs[TARGET]
    # KIP-618: a task's transactional id is GROUP-CONNECTOR-TASK; the leader writes the config
    # topic as GROUP's own (connect-cluster-GROUP).
    # Prepare* is a transaction still completing (Kafka 4.4.0 showed the config topic's id in
    # PrepareCommit once in CI): the states compared are the settled ones.
    states = wait_until(lambda: _settled(list_transactions(clusters.target.bootstrap)), 30, 0.2,
                        "no transaction still completing")
    want = {f"{GROUP}-{CONNECTOR}-{t}" for t in range(TASKS)} | {f"connect-cluster-{GROUP}"} | {
        f"{GROUP}-{CHECKPOINT}-0"}
    assert set(states) == want, states
    # The reconfiguration's fencing round left task 1's id initialized anew and unused since.
    assert states[f"{GROUP}-{CONNECTOR}-1"] == "Empty", states
    return Outcome(configs, states)


# -- the test --------------------------------------------------------------------------


def test_mirror_maker_exactly_once_under_kill9(
    clusters: Clusters, connect_deps: Path, tmp_path: Path
) -> None:
    src, target = clusters.source, clusters.target
    dst = target.bootstrap
    admin = AdminClient({"bootstrap.servers": src})
    topic = NewTopic(SOURCE, PARTITIONS, 1, config=SOURCE_CONFIGS)
    for f in admin.create_topics([topic], operation_timeout=20).values():
        f.result(30)
    worker = Worker(dst, connect_deps, tmp_path / "worker")
    rng = random.Random(SEED)
    t0 = time.monotonic()

    def lap(what: str) -> None:  # the timeline, in a failure's report (or with -s)
        print(f"{target.name} {time.monotonic() - t0:6.1f}s {what}")

    feed = TransactionalFeed(src)
    try:
        worker.start()
        wait_until(lambda: worker.put_connector(connector_config(clusters, TASKS)), 90, 0.5,
                   "connector created")
        lap("connector created")
        for kill in range(1, KILLS + 1):
            wait_for_copying(worker, dst)
            time.sleep(rng.uniform(0.1, 1.0))
            lap(f"kill {kill}")
            worker.kill9()
            if kill == 2:  # and the broker leading a partition of the copy, its transactions open
                leader = leader_of(dst, TARGET)
                broker_restart = target.bounce(leader)
                lap(f"broker {leader} (leader of {TARGET}-0) killed")
            time.sleep(rng.uniform(0.1, 0.5))
            worker.start()
        wait_for_copying(worker, dst)
        broker_restart.join()
        # New task configs (one task instead of two): before the new generation starts, the leader
        # fences the old one's transactional ids (Admin.fenceProducers, InitProducerId).
        wait_until(lambda: worker.put_connector(connector_config(clusters, 1)), 60, 0.5, "reconfigured")
        wait_until(lambda: worker.alive() and worker.fenced(TASKS), 60, 0.2, "the old tasks fenced")
        wait_until(lambda: worker.tasks_running(1), 60, 0.5, "one task running")
        lap("reconfigured to one task")
        wait_for_copying(worker, dst)
        feed.stop()
        lap(f"feed stopped: {len(feed.committed)} committed, {len(feed.aborted)} aborted")
        source = read_committed(src, SOURCE)
        wait_until(lambda: worker.alive() and mirrored(dst, source), 90, 0.5, "every record copied")
        lap("copied")
        copied = [v for values in read_committed(dst, TARGET).values() for v in values]
        lap(f"{tally('connect-mm2', target.name, (KILLS, 1), feed.committed, copied)}")
        check_copy(dst, source, feed)
        check_source_offsets(src, worker)
        lap(f"group moved over: {check_checkpoints(clusters, worker)}")
        OUTCOMES[target.name] = check_broker_side(clusters)
        lap("checked")
    except BaseException:
        print(worker.tail(), target.log_tails(), sep="\n")
        raise
    finally:
        if not feed.done.is_set():
            feed.done.set()
            feed.thread.join()
        worker.stop()


def wait_for_copying(worker: Worker, bootstrap: str) -> None:
    """Until the worker committed a transaction more to the target."""
    copied = committed_ends(bootstrap, TARGET)
    wait_until(lambda: worker.alive() and committed_ends(bootstrap, TARGET) > copied, 90, 0.2,
               f"copying after start #{worker.starts}")


def check_copy(bootstrap: str, source: dict[int, list[str]], feed: TransactionalFeed) -> None:
    """The source holds exactly the committed ids; the target partition by partition the same."""
    in_source = [v for values in source.values() for v in values]
    assert sorted(in_source) == sorted(feed.committed), "the source topic is not what was committed"
    copied = read_committed(bootstrap, TARGET)
    for p in range(PARTITIONS):
        seen = set(copied[p])
        dups = len(copied[p]) - len(seen)
        assert not dups, f"{TARGET}-{p}: {dups} records copied twice"
        assert not seen & set(feed.aborted), f"{TARGET}-{p}: aborted records copied"
        assert copied[p] == source[p], f"{TARGET}-{p}: missing {sorted(set(source[p]) - seen)[:20]}"


def check_source_offsets(source: str, worker: Worker) -> None:
    """The source offsets Connect keeps for the connector (its offsets topic, read through the
    REST API of KIP-875) name each partition's last record copied: written in the records'
    transactions, they cannot lag or lead the copy."""
    last = {p: records[-1][0] for p, records in read_records(source, SOURCE).items()}
    status, answer = worker.rest("GET", f"/connectors/{CONNECTOR}/offsets")
    assert status == 200 and isinstance(answer, dict), (status, answer)
    kept = {int(o["partition"]["partition"]): int(o["offset"]["offset"]) for o in answer["offsets"]
            if o["partition"]["topic"] == SOURCE}
    assert kept == last, (kept, last)


def check_checkpoints(clusters: Clusters, worker: Worker) -> str:
    """A group that consumed half of each partition of `orders` on the source gets offsets on
    `src.orders` on the target from MirrorCheckpointConnector; moved over, it reads from them every
    record it had not read (some it had, again: the translation rounds down to an offset sync)."""
    src, dst = clusters.source, clusters.target.bootstrap
    source = read_records(src, SOURCE)
    consumed = {p: records[len(records) // 2][0] for p, records in source.items()}  # next to read
    commit_offsets(src, GROUP_ON_SOURCE, SOURCE, consumed)
    wait_until(lambda: worker.put_connector(checkpoint_config(clusters), CHECKPOINT), 60, 0.5,
               "checkpoint connector created")
    wait_until(lambda: worker.alive() and len(group_offsets(dst, TARGET)) == PARTITIONS, 60, 0.5,
               f"{GROUP_ON_SOURCE}'s offsets on {TARGET}")
    translated = group_offsets(dst, TARGET)
    worker.rest("DELETE", f"/connectors/{CHECKPOINT}")  # no more syncs into the group, now active
    read_after = read_committed(dst, TARGET, group=GROUP_ON_SOURCE)
    again = 0
    for p in range(PARTITIONS):
        assert translated[p] > 0, f"{TARGET}-{p}: no offset translated ({translated})"
        unread = [v for o, v in source[p] if o >= consumed[p]]
        read_before = len(read_after[p]) - len(unread)
        assert read_before >= 0 and read_after[p][read_before:] == unread, (
            f"{TARGET}-{p} from {translated[p]}: not the records the group had not read on the source")
        again += read_before
    return f"{SOURCE} {consumed} -> {TARGET} {translated}, {again} records read again"


def commit_offsets(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        c.close()


def group_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """GROUP_ON_SOURCE's committed offsets on `topic` (partitions without one left out)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP_ON_SOURCE, "enable.auto.commit": False})
    try:
        found = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        return {tp.partition: tp.offset for tp in found if tp.offset >= 0}
    finally:
        c.close()


def test_both_brokers_alike() -> None:
    """Connect asked Gregor and Kafka for the same internal topics, configs and transactional ids."""
    assert set(OUTCOMES) == {"gregor", "kafka"}, f"a run did not finish: {sorted(OUTCOMES)}"
    assert OUTCOMES["gregor"] == OUTCOMES["kafka"]
