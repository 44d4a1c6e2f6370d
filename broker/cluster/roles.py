"""Applying the cluster image to this broker: which partitions it leads and follows.

After every change of the image, each partition this broker is a replica of
becomes leader (its leader epoch in the image names this broker) or follower
(of the named leader, fetched by one `ReplicaFetcher` per leader broker). The
leader's ISR proposals go to the store as compare-and-swap writes on the
partition state (AlterPartition); the image's next state is the answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import aetcd.exceptions

from broker.net.client import BrokerClient
from broker.replication.fetcher import FollowedPartition, ReplicaFetcher
from broker.replication.replica_manager import Partition, ReplicaManager
from broker.security.client import ClientSecurity
from broker.store.etcd_store import EtcdMetadataStore
from broker.store.image import NO_LEADER, PartitionState, TopicRecord
from protocol.types import NodeId, TopicPartition
from storage.log_config import LogConfig

log = logging.getLogger(__name__)


class ClusterRoles:
    def __init__(
        self, store: EtcdMetadataStore, replicas: ReplicaManager,
        log_config: Callable[[TopicRecord], LogConfig], now_ms: Callable[[], int],
        replica_lag_ms: int, fetch_max_wait_ms: int, security: ClientSecurity | None = None,
    ) -> None:
        self.security = security
        self.store = store
        self.replicas = replicas
        self.me = NodeId(replicas.node_id)
        self._log_config = log_config
        self._now_ms = now_ms
        self._lag_ms = replica_lag_ms
        self._fetch_wait_ms = fetch_max_wait_ms
        self.fetchers: dict[NodeId, ReplicaFetcher] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._checker: asyncio.Task[None] | None = None
        self._apply_due = False  # an apply is scheduled for this event-loop turn's changes
        # per hosted topic: its config overrides and the LogConfig its logs use, built once per change
        self._configs: dict[str, tuple[dict[str, str], LogConfig]] = {}
        replicas.isr_changes = self._propose
        replicas.replica_lag_ms = replica_lag_ms
        replicas.may_lead = lambda: store.registration_alive
        replicas.on_unwritable = self._hand_over

    def start(self) -> None:
        self._remove_stray_logs()
        self.store.subscribe(self._on_change)
        self._checker = asyncio.create_task(self._check_isr_forever(), name="isr-check")
        self.apply()

    def _wanted(self) -> set[TopicPartition]:
        image = self.store.image
        return {
            tp for tp, state in image.partitions.items()
            if tp[0] in image.topics and self.me in state.replicas
        }

    def _remove_stray_logs(self) -> None:
        """Logs on disk of partitions this broker no longer hosts (deleted or moved while down)."""
        wanted = self._wanted()
        for topic, indexes in self.replicas.log_manager.topics().items():
            stray = [i for i in indexes if (topic, i) not in wanted]
            if stray:
                log.info("removing %d log(s) of topic %s that this broker no longer hosts", len(stray), topic)
                self.replicas.log_manager.delete_logs(topic, stray)

    async def stop(self) -> None:
        if self._checker is not None:
            self._checker.cancel()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, *filter(None, [self._checker]), return_exceptions=True)
        await asyncio.gather(*(f.close() for f in self.fetchers.values()))

    def _on_change(self, key: str) -> None:
        """Changes arrive one key at a time (a topic of N partitions is N + 1 of them, read from
        one watch answer in one turn of the event loop): they are applied once, at the end of
        the turn, so that creating a topic costs what it adds, not N times every partition."""
        if self._apply_due or not (key == "" or key.startswith(("partitions/", "topics/", "brokers/"))):
            return
        self._apply_due = True
        asyncio.get_running_loop().call_soon(self._apply_changes)

    def _apply_changes(self) -> None:
        self._apply_due = False
        self.apply()

    def apply(self) -> None:
        """Make every hosted partition's role match the image; drop what it no longer lists."""
        image = self.store.image
        wanted = self._wanted()
        self._apply_configs({topic for topic, _index in wanted})
        with self.replicas.one_dir_sync():
            for topic, index in wanted:
                state = image.partitions[(topic, index)]
                try:
                    if state.leader == self.me:
                        self._lead(topic, index, state)
                    else:
                        self._follow(topic, index, state)
                except OSError as exc:  # its log cannot be created or written (a full disk)
                    log.error("partition %s-%d: cannot take its role (%s); trying again at the "
                              "next change", topic, index, exc.strerror or exc)
        for part in self.replicas.all_partitions():
            if (part.topic, part.index) not in wanted:
                self._drop(part)

    def _apply_configs(self, topics: set[str]) -> None:
        """Hosted logs follow their topic's config overrides when they change (the LogConfig
        is built then, not at every image change for every partition)."""
        for topic in topics:
            record = self.store.image.topics[topic]
            known = self._configs.get(topic)
            if known is None or known[0] != record.configs:
                config = self._log_config(record)
                self._configs[topic] = (dict(record.configs), config)
                self.replicas.update_config(topic, config)
        for gone in set(self._configs) - topics:
            del self._configs[gone]

    def _drop(self, part: Partition) -> None:
        self._unfollow(part.topic, part.index)
        self.replicas.remove_partition(part.topic, part.index)
        self.replicas.log_manager.delete_logs(part.topic, [part.index])
        log.info("partition %s-%d: no longer hosted here; log deleted", part.topic, part.index)

    def _lead(self, topic: str, index: int, state: PartitionState) -> None:
        self._unfollow(topic, index)
        self.replicas.become_leader(topic, index, self._configs[topic][1], state, self._now_ms())

    def _follow(self, topic: str, index: int, state: PartitionState) -> None:
        part = self.replicas.become_follower(topic, index, self._configs[topic][1], state)
        self._unfollow(topic, index)
        if state.leader == NO_LEADER or state.leader not in self.store.image.brokers:
            return
        followed = FollowedPartition(topic, index, part.log, state.leader_epoch, part.set_high_watermark)
        self._fetcher_for(state.leader).follow(followed)

    def _unfollow(self, topic: str, index: int) -> None:
        for fetcher in self.fetchers.values():
            fetcher.unfollow(topic, index)

    def _fetcher_for(self, leader: NodeId) -> ReplicaFetcher:
        fetcher = self.fetchers.get(leader)
        registration = self.store.image.brokers[leader]
        if fetcher is not None and (fetcher.client.host, fetcher.client.port) == (
            registration.host, registration.port
        ):
            return fetcher
        if fetcher is not None:
            self._spawn(fetcher.close())
        client = BrokerClient(registration.host, registration.port, f"replica-{self.me}",
                              security=self.security)
        fetcher = ReplicaFetcher(self.me, client, self._now_ms, self._fetch_wait_ms,
                                 on_progress=self._on_follower_progress,
                                 write_failures=self.replicas.write_failures)
        self.fetchers[leader] = fetcher
        return fetcher

    def _on_follower_progress(self, followed: FollowedPartition) -> None:
        part = self.replicas.partition(followed.topic, followed.index)
        if part is not None:
            part.wake()

    # -- ISR changes (AlterPartition) -------------------------------------------

    def _propose(self, part: Partition, isr: tuple[NodeId, ...]) -> None:
        self._spawn(self._alter_isr(part, isr))

    async def _alter_isr(self, part: Partition, isr: tuple[NodeId, ...]) -> None:
        leader = part.leader
        if leader is None:  # it became a follower before this task ran: nothing to propose
            return
        current = leader.state
        new = current.with_isr(isr)
        try:
            accepted = await self.store.alter_partition(part.topic, part.index, current, new)
        except (aetcd.exceptions.ClientError, OSError) as exc:
            log.warning("partition %s-%d: ISR change to %s failed: %s", part.topic, part.index,
                        list(isr), type(exc).__name__)
            accepted = False
        if accepted:
            log.info("partition %s-%d: ISR %s -> %s", part.topic, part.index, list(current.isr), list(isr))
            leader.committed(new)
        else:
            leader.rejected()
        part.advance_high_watermark()  # the ISR (or the pending one, now dropped) may hold it back

    # -- a log that cannot be written (a full disk) -----------------------------

    def _hand_over(self, part: Partition) -> None:
        self._spawn(self._resign(part))

    async def _resign(self, part: Partition) -> None:
        """Hand leadership to the first live in-sync follower and leave the ISR (Kafka's
        controller does so for a broker's offline log dir); with none, stay the leader."""
        if part.leader is None:
            return
        current = part.leader.state
        isr = tuple(n for n in current.isr if n != self.me)
        successor = next((n for n in current.replicas if n in isr and n in self.store.image.brokers), None)
        if successor is None:
            log.warning("partition %s-%d: no other in-sync replica to take over; staying leader",
                        part.topic, part.index)
            return
        try:
            accepted = await self.store.alter_partition(
                part.topic, part.index, current, current.with_leader(successor, isr)
            )
        except (aetcd.exceptions.ClientError, OSError) as exc:
            log.warning("partition %s-%d: handing over leadership failed: %s", part.topic, part.index,
                        type(exc).__name__)
            return
        if accepted:
            log.warning("partition %s-%d: leadership handed to broker %d (its log here cannot be "
                        "written)", part.topic, part.index, successor)

    async def _check_isr_forever(self) -> None:
        while True:
            await asyncio.sleep(self._lag_ms / 2000)
            self.replicas.check_isr(self._now_ms())

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
