"""A real cluster for tests: one etcd and three `gregor broker` processes on 127.0.0.1.

Waits are short by configuration (a 2 s broker session, a 2 s replica lag
limit), so a killed broker is noticed in seconds. `metadata()` reads the
cluster image from etcd the way brokers see it, for assertions on leaders,
ISR and the controller.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker.cluster.address import EtcdAddress
from broker.cluster.etcd_store import EtcdMetadataStore
from broker.cluster.image import ClusterImage, PartitionState
from tests.integration.etcd import EtcdProcess
from tests.integration.harness import BrokerFactory, BrokerProcess

SESSION_MS = 2000
LAG_MS = 2000


class Cluster:
    def __init__(
        self, base: Path, size: int = 3, overrides: dict[str, Any] | None = None,
        per_broker: Callable[[int], dict[str, Any]] | None = None,
    ) -> None:
        """`per_broker(node_id)`: overrides of one broker (e.g. its own metrics port)."""
        self.etcd = EtcdProcess(base / "etcd").start()
        self.url = f"{self.etcd.url}/c-{uuid.uuid4().hex[:8]}"
        self.factory = BrokerFactory(base)
        common = {
            "metadata.store": self.url,
            "broker.session.timeout.ms": SESSION_MS,
            "replica.lag.time.max.ms": LAG_MS,
            "default.replication.factor": 3,
            "min.insync.replicas": 2,
            "offsets.topic.replication.factor": 3,
            "transaction.state.log.replication.factor": 3,
            "transaction.state.log.min.isr": 2,
            **(overrides or {}),
        }
        self.brokers = [
            self.factory({**common, **(per_broker(n) if per_broker else {})}, start=False, node_id=n)
            for n in range(1, size + 1)
        ]
        for b in self.brokers:
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

    def partition(self, topic: str, index: int = 0) -> PartitionState:
        return self.image().partitions[(topic, index)]

    def close(self) -> None:
        self.factory.close()
        self.etcd.close()
