"""This broker's membership of an etcd cluster: the store, its registration, the controller.

Start-up order (cli → Broker): `join` opens the store and settles the cluster
id before the data dir is opened, so a data dir of another cluster is refused
by the log manager's meta.properties check; `register` runs once the data dir
is locked and recovered, and refuses a node id that a live broker holds.
"""

from __future__ import annotations

import logging
import math
import uuid

from broker.cluster.address import EtcdAddress
from broker.cluster.controller import KAFKA_BALANCING, ClusterController, LeaderBalancing
from broker.cluster.etcd_store import EtcdMetadataStore
from broker.cluster.forwarding import ControllerChannel
from broker.cluster.image import BrokerRegistration, NodeId
from storage.checkpoints import random_kafka_uuid

log = logging.getLogger(__name__)


class ClusterMembership:
    def __init__(
        self, store: EtcdMetadataStore, node_id: NodeId, cluster_id: str,
        balancing: LeaderBalancing = KAFKA_BALANCING,
    ) -> None:
        self.store = store
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.controller = ClusterController(store, node_id, balancing)
        self.channel = ControllerChannel(store, node_id)

    @classmethod
    async def join(
        cls, url: str, node_id: int, configured_cluster_id: str, session_timeout_ms: int,
        connect_attempts: int, balancing: LeaderBalancing = KAFKA_BALANCING,
    ) -> ClusterMembership:
        """Open the store (bounded retries) and read or create the cluster id."""
        ttl_s = max(1, math.ceil(session_timeout_ms / 1000))
        store = EtcdMetadataStore(EtcdAddress.parse(url), lease_ttl_s=ttl_s)
        await store.open(attempts=connect_attempts)
        cluster_id = await store.ensure_cluster_id(configured_cluster_id or random_kafka_uuid())
        if configured_cluster_id and configured_cluster_id != cluster_id:
            await store.close()
            raise ClusterIdMismatch(
                f"cluster.id is {configured_cluster_id!r} but the metadata store at {url} "
                f"holds cluster {cluster_id!r}"
            )
        return cls(store, NodeId(node_id), cluster_id, balancing)

    async def register(self, host: str, port: int, rack: str | None) -> None:
        """Register under a lease (NodeIdInUse if taken), then take part in controller elections."""
        registration = BrokerRegistration(self.node_id, host, port, rack, uuid.uuid4().hex)
        await self.store.register(registration)
        log.info("broker %d registered in cluster %s (%s:%d, rack %s)",
                 self.node_id, self.cluster_id, host, port, rack)
        self.controller.start()

    async def close(self) -> None:
        await self.controller.stop()
        await self.channel.close()
        await self.store.close()


class ClusterIdMismatch(Exception):
    """The configured cluster.id is not the cluster the metadata store holds."""
