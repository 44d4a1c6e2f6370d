"""This broker's membership of an etcd cluster: the store, its registration, the controller.

Start-up order (cli → Broker): `join` opens the store and settles the cluster
id before the data dir is opened, so a data dir of another cluster is refused
by the log manager's meta.properties check; `register` runs once the data dir
is locked and recovered, and refuses a node id that a live broker holds; etcd out of
reach meanwhile (paused, cut off) is retried as often as `join` tries to connect.
"""

from __future__ import annotations

import logging
import math
import uuid

from broker.base.faults import slow_point
from broker.cluster.controller import KAFKA_BALANCING, ClusterController, LeaderBalancing
from broker.security.client import ClientSecurity
from broker.store.address import EtcdAddress
from broker.store.etcd_store import EtcdMetadataStore
from broker.store.image import BrokerRegistration, ClusterImage
from protocol.types import NodeId
from storage.checkpoints import random_kafka_uuid

log = logging.getLogger(__name__)


class ClusterMembership:
    def __init__(
        self, store: EtcdMetadataStore, node_id: NodeId, cluster_id: str,
        balancing: LeaderBalancing = KAFKA_BALANCING, security: ClientSecurity | None = None,
        attempts: int = 30,
    ) -> None:
        self.store = store
        self.node_id = node_id
        self.cluster_id = cluster_id
        self._attempts = attempts  # registration attempts at start-up, 1 s apart
        self.controller = ClusterController(store, node_id, balancing, security)
        self.channel = self.controller.channel

    @classmethod
    async def join(
        cls, url: str, node_id: int, configured_cluster_id: str, session_timeout_ms: int,
        connect_attempts: int, balancing: LeaderBalancing = KAFKA_BALANCING,
        security: ClientSecurity | None = None,
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
        return cls(store, NodeId(node_id), cluster_id, balancing, security, connect_attempts)

    async def register(
        self, host: str, port: int, rack: str | None, endpoints: tuple[tuple[str, str, int], ...] = (),
        data_dir_id: str = "",
    ) -> None:
        """Register under a lease (NodeIdInUse if taken), then take part in controller elections.
        `host`/`port`: where other brokers connect; `endpoints`: every advertised listener;
        `data_dir_id`: the identity of the (locked) data dir, see `_end_own_session`."""
        registration = BrokerRegistration(
            self.node_id, host, port, rack, uuid.uuid4().hex, endpoints, data_dir_id
        )
        await slow_point("broker-register")
        await self._register_retrying(registration)
        log.info("broker %d registered in cluster %s (%s:%d, rack %s)",
                 self.node_id, self.cluster_id, host, port, rack)
        self.controller.start()

    async def _register_retrying(self, registration: BrokerRegistration) -> None:
        """etcd out of reach while registering (a chaos campaign's broker, restarted while cut
        off from etcd, exited with a traceback) is retried with a line each, at most the
        start-up's attempts, then StoreUnavailable; as Kafka's broker retries its registration
        until initial.broker.registration.timeout.ms. NodeIdInUse is refused at once."""
        async def register() -> None:
            await self._end_own_session(registration)
            await self.store.register(registration)

        await self.store.retrying(f"broker {self.node_id} registering", register, self._attempts)

    async def _end_own_session(self, registration: BrokerRegistration) -> None:
        """A restart within the session timeout after kill -9 finds its dead incarnation still
        registered: end that session at once, then wait (at most a session) until the
        controller has failed the dead incarnation's partitions over, as after a lease
        expiry, so the new process starts as a follower of a new leader epoch."""
        if not await self.store.end_own_session(registration):
            return
        log.warning("broker %d: ended the session of its previous incarnation (same data dir); "
                    "waiting for its partitions to fail over", self.node_id)
        if not await self.store.wait_for(lambda i: failed_over(i, self.node_id), self.store.session_s):
            log.warning("broker %d: no controller moved its partitions within the session timeout; "
                        "registering anyway", self.node_id)

    async def close(self) -> None:
        await self.controller.stop()
        await self.store.close()


def failed_over(image: ClusterImage, node: NodeId) -> bool:
    """True when no partition has `node` as leader, nor in its ISR beside other members
    (a partition whose last ISR member it is stays offline, waiting for it)."""
    return all(
        state.leader != node and (node not in state.isr or state.isr == (node,))
        for state in image.partitions.values()
    )


class ClusterIdMismatch(Exception):
    """The configured cluster.id is not the cluster the metadata store holds."""
