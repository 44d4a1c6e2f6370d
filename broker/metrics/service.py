"""What the broker starts and stops for monitoring: the Prometheus endpoint (when
`metrics.listener` is set), the flush timer and the cluster-image watcher (ISR shrinks and
expands, controller changes)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.process_collector import ProcessCollector

from broker.metrics.collectors import BrokerStateCollector, ControllerStatus, StateSources, StatsCollector
from broker.metrics.endpoint import MetricsEndpoint
from broker.metrics.stats import STATS
from broker.store.image import ControllerRecord, PartitionState
from protocol.types import TopicPartition

if TYPE_CHECKING:
    import socket

    from broker.cluster.membership import ClusterMembership
    from broker.store.etcd_store import EtcdMetadataStore

log = logging.getLogger(__name__)


def registry_for(sources: StateSources, topic_exists: Callable[[str], bool]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StatsCollector(STATS, topic_exists))
    registry.register(BrokerStateCollector(sources))
    ProcessCollector(registry=registry)
    return registry


def controller_status(cluster: ClusterMembership | None) -> ControllerStatus:
    """What the controller gauges say: a single broker is its own active controller."""
    if cluster is None:
        return ControllerStatus(active=True, offline_partitions=0, epoch=None)
    image = cluster.store.image
    active = cluster.controller.active
    offline = sum(1 for s in image.partitions.values() if s.leader < 0) if active else 0
    record = image.controller
    return ControllerStatus(active, offline, record.epoch if record is not None else -1)


class ClusterWatcher:
    """Counts ISR shrinks/expands of the partitions this broker leads, and controller
    changes, as the cluster image applies them (read-only: a store subscriber)."""

    def __init__(self, store: EtcdMetadataStore, node_id: int) -> None:
        self.store = store
        self.node_id = node_id
        image = store.image
        self._isr: dict[TopicPartition, PartitionState] = dict(image.partitions)
        self._controller: ControllerRecord | None = image.controller
        store.subscribe(self._on_change)

    def _on_change(self, key: str) -> None:
        image = self.store.image
        if key in ("", "controller") and image.controller != self._controller:
            if image.controller is not None:
                STATS.cluster.controller_changes += 1
            self._controller = image.controller
        parts = key.split("/")
        if parts[0] == "partitions" and len(parts) == 3:
            self._partition((parts[1], int(parts[2])), image.partitions.get((parts[1], int(parts[2]))))
        elif key == "":
            for tp, state in image.partitions.items():
                self._partition(tp, state)

    def _partition(self, tp: TopicPartition, state: PartitionState | None) -> None:
        old = self._isr.get(tp)
        if state is None:
            self._isr.pop(tp, None)
            return
        self._isr[tp] = state
        if old is None or state.leader != self.node_id or old.leader_epoch != state.leader_epoch:
            return  # a new leader's ISR is no change of this leader's
        if set(state.isr) < set(old.isr):
            STATS.cluster.isr_shrinks += 1
        elif set(state.isr) > set(old.isr):
            STATS.cluster.isr_expands += 1


class BrokerMetrics:
    def __init__(
        self, sock: socket.socket | None, sources: StateSources, topic_exists: Callable[[str], bool],
        listener: str,
    ) -> None:
        """`sock`: the bound `metrics.listener` (`listener`), None for no endpoint."""
        registry = registry_for(sources, topic_exists)
        self.endpoint = MetricsEndpoint(sock, registry) if sock is not None else None
        self.listener = listener
        self._watcher: ClusterWatcher | None = None

    async def start(self, store: EtcdMetadataStore | None, node_id: int) -> None:
        """`store`: the cluster's metadata store to watch, None on a single broker."""
        if store is not None:
            self._watcher = ClusterWatcher(store, node_id)
        if self.endpoint is not None:
            await self.endpoint.start()
            log.info("metrics served on %s, path /metrics", self.listener)

    async def stop(self) -> None:
        if self.endpoint is not None:
            await self.endpoint.stop()
