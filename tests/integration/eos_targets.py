"""The clusters the exactly-once application tests (Kafka Streams, Kafka Connect / MirrorMaker 2,
Flink) run their scenarios on, Gregor's and then Apache Kafka's: three brokers (Gregor's on etcd,
Kafka's KRaft nodes), each as a `Target` with the same face - its bootstrap, its logs' tails, and
a kill -9 of one broker whose restart runs on a thread while the scenario goes on; and one broker
of either kind (`one_broker`: MirrorMaker 2's source cluster).

And the long runs' bookkeeping (`make eos-apps`): each kill test takes its number of application
kills from EOS_KILLS (its own handful in `make test`), appends what it counted to the JSON-lines
file EOS_RESULTS names, and `python -m tests.integration.eos_targets FILE` prints them as a table."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from confluent_kafka.admin import AdminClient

from tests.integration.cluster import LAG_MS, SESSION_MS, running_cluster
from tests.integration.harness import started_broker
from tests.integration.kafka import KafkaCluster, require_kafka, started_kafka

NAMES = ("gregor", "kafka")  # the targets' names, for a fixture's params
# Kafka's nodes notice a killed one as soon as Gregor's cluster does (tests/integration/cluster.py:
# a broker session of 2 s, a replica lagging 2 s leaves the ISR): part of each test's Kafka config.
KAFKA_FAILOVER: dict[str, object] = {
    "broker.session.timeout.ms": SESSION_MS,
    "broker.heartbeat.interval.ms": 500,
    "replica.lag.time.max.ms": LAG_MS,
}


@dataclass(frozen=True)
class Target:
    name: str
    bootstrap: str
    log_tails: Callable[[], str]
    bounce: Callable[[int], threading.Thread]  # kill -9 the broker of this node id; its restart


class Restart(threading.Thread):
    """A broker's `start` on a thread, half a second from now: the scenario goes on meanwhile;
    `join` raises what the start raised."""

    def __init__(self, start: Callable[[], object]) -> None:
        super().__init__(name="broker-restart")
        self.start_broker = start
        self.error: BaseException | None = None

    def run(self) -> None:
        time.sleep(0.5)
        try:
            self.start_broker()
        except BaseException as e:
            self.error = e

    def join(self, timeout: float | None = None) -> None:
        super().join(timeout)
        if self.error is not None:
            raise self.error


def restarting(start: Callable[[], object]) -> Restart:
    restart = Restart(start)
    restart.start()
    return restart


@contextlib.contextmanager
def three_brokers(
    name: str, workdir: Path, gregor_config: dict[str, object], kafka_config: dict[str, object]
) -> Iterator[Target]:
    """Target `name` ("gregor" or "kafka") under `workdir`, stopped on the way out."""
    (workdir / name).mkdir()
    if name == "gregor":
        with running_cluster(workdir / "gregor", overrides=gregor_config) as cluster:
            def bounce_broker(node_id: int) -> Restart:
                cluster.broker(node_id).kill9()
                return restarting(cluster.broker(node_id).start)

            yield Target("gregor", cluster.bootstrap, cluster.log_tails, bounce_broker)
        return
    require_kafka()
    kafka = KafkaCluster(workdir / "kafka", kafka_config).start()

    def bounce_node(node_id: int) -> Restart:
        kafka.nodes[node_id - 1].kill9()
        return restarting(kafka.nodes[node_id - 1].start)

    try:
        yield Target("kafka", kafka.bootstrap, kafka.log_tails, bounce_node)
    finally:
        for node in kafka.nodes:  # nothing to keep: no controlled shutdown to wait for
            node.kill9()


def leader_of(bootstrap: str, topic: str, partition: int = 0) -> int:
    """The node id of the partition's leader."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return int(admin.list_topics(topic, timeout=10).topics[topic].partitions[partition].leader)


@contextlib.contextmanager
def one_broker(name: str, workdir: Path, config: dict[str, object]) -> Iterator[str]:
    """A cluster of one broker of kind `name` (a Gregor broker, a Kafka node): its bootstrap."""
    workdir.mkdir()
    if name == "gregor":
        with started_broker(workdir, config) as broker:
            yield broker.bootstrap
        return
    require_kafka()
    with started_kafka(workdir, config) as node:
        yield node.bootstrap


# -- the long runs: kills, counts, the table ---------------------------------------------------


def kills(default: int, least: int = 1) -> int:
    """How many times the test kills its application: EOS_KILLS (`make eos-apps`), or `default`;
    `least` at the fewest (a scenario that does something at its second kill)."""
    return max(least, int(os.environ.get("EOS_KILLS") or default))


@dataclass(frozen=True)
class Tally:
    """One run's output against its input, by the records' ids: `duplicates` records more than
    once, `lost` input records missing, `foreign` output records of no input record (an aborted
    one)."""

    application: str
    broker: str
    kills: int  # the application's kill -9s
    broker_kills: int
    records: int  # input records
    duplicates: int
    lost: int
    foreign: int


def tally(application: str, broker: str, faults: tuple[int, int], sent: Iterable[object],
          received: Iterable[object]) -> Tally:
    """Counts `received` against `sent` (ids), appended to EOS_RESULTS when set; `faults`: the
    application's kills and the brokers'."""
    sent_ids, received_ids = list(sent), list(received)
    want, got = set(sent_ids), set(received_ids)
    found = Tally(application, broker, *faults, records=len(sent_ids),
                  duplicates=len(received_ids) - len(got), lost=len(want - got), foreign=len(got - want))
    if path := os.environ.get("EOS_RESULTS"):
        with open(path, "a") as out:
            out.write(json.dumps(asdict(found)) + "\n")
    return found


def table(lines: Iterable[str]) -> str:
    """The tallies (JSON lines) as a text table, one row each."""
    heads = [f.name.replace("_", " ") for f in fields(Tally)]
    rows = [[str(v) for v in json.loads(line).values()] for line in lines if line.strip()]
    widths = [max(len(c) for c in col) for col in zip(heads, *rows, strict=True)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                     for row in [heads, *rows])


if __name__ == "__main__":  # `make eos-apps`: the table of its results file
    with open(sys.argv[1]) as results:
        print(table(results))
