"""The two three-broker clusters the exactly-once application tests (Kafka Streams, Kafka
Connect) run their scenario on, one after the other: Gregor's on etcd and Apache Kafka's KRaft
nodes, each as a `Target` with the same face - its bootstrap, its logs' tails, and a kill -9 of
one broker whose restart runs on a thread while the scenario goes on."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.integration.cluster import running_cluster
from tests.integration.kafka import KafkaCluster, require_kafka

NAMES = ("gregor", "kafka")  # the targets' names, for a fixture's params


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
