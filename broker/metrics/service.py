"""What the broker starts and stops for monitoring: the Prometheus endpoint (when
`metrics.listener` is set), the flush timer, the cluster-image watcher (ISR shrinks and
expands, controller changes) and the hanging-transaction check."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.process_collector import ProcessCollector

from broker import metrics
from broker.cluster.image import ControllerRecord, PartitionState
from broker.coordination.hanging import HangingTransactionCheck
from broker.metrics.collectors import BrokerStateCollector, StatsCollector
from broker.metrics.endpoint import MetricsEndpoint
from broker.metrics.stats import STATS
from storage import log as storage_log

if TYPE_CHECKING:
    import socket

    from broker.cluster.membership import ClusterMembership
    from broker.server import Broker

log = logging.getLogger(__name__)


def registry_for(broker: Broker) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StatsCollector(STATS, lambda topic: broker.topics.get(topic) is not None))
    registry.register(BrokerStateCollector(broker))
    ProcessCollector(registry=registry)
    return registry


class ClusterWatcher:
    """Counts ISR shrinks/expands of the partitions this broker leads, and controller
    changes, as the cluster image applies them (read-only: a store subscriber)."""

    def __init__(self, cluster: ClusterMembership, node_id: int) -> None:
        self.cluster = cluster
        self.node_id = node_id
        image = cluster.store.image
        self._isr: dict[tuple[str, int], PartitionState] = dict(image.partitions)
        self._controller: ControllerRecord | None = image.controller
        cluster.store.subscribe(self._on_change)

    def _on_change(self, key: str) -> None:
        image = self.cluster.store.image
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

    def _partition(self, tp: tuple[str, int], state: PartitionState | None) -> None:
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
    def __init__(self, broker: Broker, sock: socket.socket | None) -> None:
        """`sock`: the bound `metrics.listener` (bind_metrics_listener), None for no endpoint."""
        self.broker = broker
        self.endpoint = MetricsEndpoint(sock, registry_for(broker)) if sock is not None else None
        self.hanging = HangingTransactionCheck(broker)
        self._watcher: ClusterWatcher | None = None

    async def start(self) -> None:
        if metrics.flushed not in storage_log.FLUSH_LISTENERS:
            storage_log.FLUSH_LISTENERS.append(metrics.flushed)
        if self.broker.cluster is not None:
            self._watcher = ClusterWatcher(self.broker.cluster, self.broker.node_id)
        if self.endpoint is not None:
            await self.endpoint.start()
            log.info("metrics served on %s, path /metrics", self.broker.config["metrics.listener"])
        self.hanging.start()

    async def stop(self) -> None:
        await self.hanging.stop()
        if self.endpoint is not None:
            await self.endpoint.stop()
