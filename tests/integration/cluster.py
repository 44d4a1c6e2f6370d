"""A real cluster for tests: one etcd and three `gregor broker` processes on 127.0.0.1.

Waits are short by configuration (a 2 s broker session, a 2 s replica lag
limit), so a killed broker is noticed in seconds. `metadata()` reads the
cluster image from etcd the way brokers see it, for assertions on leaders,
ISR and the controller.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from broker.store.address import EtcdAddress
from broker.store.etcd_store import EtcdMetadataStore
from broker.store.image import ClusterImage, PartitionState
from tests.integration.etcd import EtcdProcess
from tests.integration.harness import BrokerFactory, BrokerProcess

SESSION_MS = 2000
LAG_MS = 2000
FETCH_WAIT_MS = 500  # a follower's fetch waits at most this long at its leader


class Cluster:
    def __init__(
        self, base: Path, size: int = 3, overrides: dict[str, Any] | None = None,
        per_broker: Callable[[int], dict[str, Any]] | None = None, crash_points: bool = False,
        ports: dict[int, int] | None = None,
    ) -> None:
        """`per_broker(node_id)`: overrides of one broker (e.g. its own metrics port);
        `ports`: a broker's client port when `per_broker` names it in its own `listeners`."""
        self.etcd = EtcdProcess(base / "etcd").start()
        self.url = f"{self.etcd.url}/c-{uuid.uuid4().hex[:8]}"
        self.factory = BrokerFactory(base)
        common = {
            "metadata.store": self.url,
            "broker.session.timeout.ms": SESSION_MS,
            "replica.lag.time.max.ms": LAG_MS,
            "replica.fetch.wait.max.ms": FETCH_WAIT_MS,
            "default.replication.factor": 3,
            "min.insync.replicas": 2,
            "offsets.topic.replication.factor": 3,
            "transaction.state.log.replication.factor": 3,
            "transaction.state.log.min.isr": 2,
            **(overrides or {}),
        }
        self.brokers = [
            self.factory({**common, **(per_broker(n) if per_broker else {})}, start=False, node_id=n,
                         port=(ports or {}).get(n))
            for n in range(1, size + 1)
        ]
        for b in self.brokers:
            if crash_points:
                b.env["GREGOR_CRASH_POINTS_FILE"] = str(b.workdir / "crash-points")
            b.start()

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers if b.running)

    def broker(self, node_id: int) -> BrokerProcess:
        return self.brokers[node_id - 1]

    def image(self) -> ClusterImage:
        return asyncio.run(self._read_image())

    async def _read_image(self) -> ClusterImage:
        store = EtcdMetadataStore(EtcdAddress.parse(self.url))
        await store.open(attempts=3, interval_s=0.2)
        await store.close()
        return store.image

    def wait_for(self, predicate: Callable[[ClusterImage], bool], timeout_s: float = 20) -> ClusterImage:
        deadline = time.monotonic() + timeout_s
        while True:
            image = self.image()
            if predicate(image):
                return image
            if time.monotonic() > deadline:
                raise AssertionError(f"cluster did not reach the expected state: {image}")
            time.sleep(0.2)

    def arm(self, node_id: int, points: str) -> None:
        """Arm crash points in one running broker (started with crash_points=True)."""
        broker = self.broker(node_id)
        (broker.workdir / "crash-points").write_text(points)
        armed = broker.log_text().count("crash points armed")
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while broker.log_text().count("crash points armed") == armed:
            assert time.monotonic() < deadline, f"broker {node_id} did not arm {points}"
            time.sleep(0.02)

    def create_topic(self, partitions: int = 1, rf: int = 3, prefix: str = "r") -> str:
        """A new topic, once every broker serves it with an ISR of `rf`."""
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        futures = admin.create_topics([NewTopic(name, partitions, rf)], operation_timeout=20)
        futures[name].result(30)
        self.wait_for(lambda i: all(
            (name, p) in i.partitions and len(i.partitions[(name, p)].isr) == rf for p in range(partitions)
        ))
        for b in self.brokers:
            if b.running:
                wait_until_served(b.bootstrap, name, partitions)
        return name

    def partition(self, topic: str, index: int = 0) -> PartitionState:
        return self.image().partitions[(topic, index)]

    def restore(self) -> None:
        """Every broker running again (resumed if paused, started if stopped) and registered."""
        for b in self.brokers:
            if b.proc is not None:
                b.resume()
            if not b.running:
                b.start()
        self.wait_for(lambda i: len(i.brokers) == len(self.brokers) and i.controller is not None)

    def log_tails(self, lines: int = 15) -> str:
        return "\n".join(f"--- broker {b.node_id} log tail ---\n{b.log_tail(lines)}" for b in self.brokers)

    def close(self) -> None:
        self.factory.close()
        self.etcd.close()


@contextlib.contextmanager
def running_cluster(base: Path, show_logs_on_error: bool = False, **options: Any) -> Iterator[Cluster]:
    """A cluster whose brokers all registered and elected a controller; closed on the way out
    (with every broker's log tail printed first if the body failed and `show_logs_on_error`)."""
    cluster = Cluster(base, **options)
    try:
        cluster.wait_for(lambda i: len(i.brokers) == len(cluster.brokers) and i.controller is not None)
        yield cluster
    except BaseException:
        if show_logs_on_error:
            print(cluster.log_tails())
        raise
    finally:
        cluster.close()


def wait_until_served(bootstrap: str, topic: str, partitions: int, timeout_s: float = 20) -> None:
    """Until this broker's own Metadata answer lists the topic with a leader for every partition."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout_s
    while True:
        found = admin.list_topics(topic, timeout=10).topics.get(topic)
        if found is not None and found.error is None and len(found.partitions) == partitions and all(
            p.leader >= 0 for p in found.partitions.values()
        ):
            return
        assert time.monotonic() < deadline, f"{bootstrap} does not serve {topic}: {found}"
        time.sleep(0.1)
