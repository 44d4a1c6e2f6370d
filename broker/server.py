"""The broker process: owns the storage, metadata and handlers, and serves sockets."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Awaitable
from typing import Any

from broker import metrics
from broker.api.services import Cluster, Services
from broker.base.clock import now_ms
from broker.base.faults import crash_point
from broker.base.loop_watch import watch_loop
from broker.cluster.membership import ClusterMembership
from broker.cluster.producer_ids import PrefetchedProducerIdBlocks
from broker.cluster.roles import ClusterRoles
from broker.cluster.topic_manager import TopicManager
from broker.cluster.topics import ClusterTopicManager
from broker.cluster.view import BrokerInfo, ClusterView, SingleNodeView
from broker.config import BrokerConfig
from broker.coordination.coordinator_log import CoordinatorLog
from broker.coordination.groups import GroupCoordinator
from broker.coordination.hanging import HangingTransactionCheck
from broker.coordination.marker_writer import MarkerWriter
from broker.coordination.transactions import TransactionCoordinator
from broker.dynamic_config import DynamicBrokerConfigs
from broker.front.acceptor import Acceptor, Slots
from broker.front.connection import Connection
from broker.front.listeners import bind_listener, bind_metrics
from broker.front.quotas import ConnectionLimits, ConnectionQuotas
from broker.handlers import HANDLER_TABLE
from broker.metrics import request_log
from broker.metrics.collectors import StateSources
from broker.metrics.service import BrokerMetrics, controller_status
from broker.replication.fetch_sessions import FetchSessionCache
from broker.replication.replica_manager import ReplicaManager
from broker.security.acl_store import ClusterAcls, LocalAcls
from broker.security.authorizer import STANDARD_AUTHORIZER, AclAuthorizer, AllowAllAuthorizer, super_users
from broker.security.client import inter_broker_security
from broker.security.listener import listener_security
from broker.security.rules import Policy
from broker.security.scram_store import cluster_credentials, local_credentials
from broker.store.local_store import LocalMetadataStore
from coordinator.producer_ids import ProducerIdManager
from protocol.internal_topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from storage.cleaner.cleaner import CleanerConfig, LogCleaner
from storage.log_config import LogConfig
from storage.log_manager import LogManager, lock_log_dirs

log = logging.getLogger(__name__)


class Broker:
    def __init__(self, config: BrokerConfig, cluster: ClusterMembership | None = None) -> None:
        self.config = config
        self.cluster = cluster
        self.node_id = config.node_id
        self.client_security = inter_broker_security(config)  # the brokers' own connections
        dirs = config.log_dirs
        holder = f"pid={os.getpid()} node.id={config.node_id} listener={config.values['listeners']}"
        locks = lock_log_dirs(dirs, holder)  # before anything reads or writes the dirs
        self._sockets = {
            name: bind_listener(f"{name}://{at.host}:{at.port}", at.host, at.port)
            for name, at in config.listeners.items()
        }
        metrics_socket = bind_metrics(config.metrics_listener)
        self.store = LocalMetadataStore(dirs[0])
        self.dynamic_configs = DynamicBrokerConfigs(config, self.store)
        config = self.config = self.dynamic_configs.config  # explicit: a live view with dynamic keys
        self.log_manager = LogManager(
            dirs, config.node_id, cluster.cluster_id if cluster else config.cluster_id or None,
            default_config=LogConfig.from_properties(config.explicit, {}),
            topic_configs={
                name: LogConfig.from_properties(config.explicit, configs)
                for name, configs in self._topic_overrides().items()
            },
            now_ms=now_ms(),
            dir_locks=locks,
            on_flush=metrics.flushed,
        )
        self.replicas = ReplicaManager(self.log_manager, config.node_id,
                                       config.transaction_partition_verification_enable)
        self.cleaner = LogCleaner(self.log_manager.all_logs, _cleaner_config(config), crash_point)
        self.view: Cluster = self._metadata_view()
        self.topics = self._topic_manager()
        self._prefetched = PrefetchedProducerIdBlocks(cluster.store) if cluster else None
        reserve = self._prefetched.reserve if self._prefetched else self.store.reserve_producer_ids
        self.producer_ids = ProducerIdManager(reserve)
        self.roles = self._cluster_roles()
        self._coordinators(config)
        self.dynamic_configs.on_change = self._apply_dynamic_configs
        authorizer, acls = self._authorizer(config)
        scram = cluster_credentials(cluster.store) if cluster is not None else local_credentials(self.store)
        self._security = {name: listener_security(config, name, scram.lookup) for name in config.listeners}
        self.services = Services(
            partitions=self.replicas, topics=self.topics, cluster=self.view,
            controller=cluster.controller if cluster is not None else None,
            transactions=self.transactions, groups=self.groups, markers=self.markers,
            configs=self.dynamic_configs, producer_ids=self.producer_ids, authorizer=authorizer,
            api_versions=HANDLER_TABLE, clock=now_ms, fetch_sessions=FetchSessionCache(), acls=acls,
            scram=scram,
        )
        self._acceptors: list[Acceptor] = []
        self._stopping = asyncio.Event()
        # the open connections, by listener and address (max.connections and the like)
        self._slots = Slots(ConnectionQuotas(ConnectionLimits.current(config), config.listeners))
        self.metrics = BrokerMetrics(
            metrics_socket, self._state_sources(), lambda topic: self.topics.get(topic) is not None,
            config.metrics_listener,
        )

    def _coordinators(self, config: BrokerConfig) -> None:
        """Both coordinator edges over their internal topics, the marker writer between them,
        and the hanging-transaction check; each edge follows the leadership of its partitions."""
        group_log = CoordinatorLog(
            self.replicas, OFFSETS_TOPIC, config.offsets_commit_timeout_ms / 1000
        )
        self.groups = GroupCoordinator(config, group_log, self.topics)
        self.markers = MarkerWriter(self.replicas, self.topics, self.groups)
        txn_log = CoordinatorLog(
            self.replicas, TRANSACTION_STATE_TOPIC, config.request_timeout_ms / 1000
        )
        self.transactions = TransactionCoordinator(
            config, txn_log, self.topics, self.view, self.producer_ids, self.markers, self.client_security
        )
        self.replicas.leadership_listeners += [self.transactions.on_leadership, self.groups.on_leadership]
        self.hanging = HangingTransactionCheck(
            config, self.replicas, self.transactions, self.view, self.markers, self.client_security
        )

    def _authorizer(
        self, config: BrokerConfig
    ) -> tuple[AclAuthorizer | AllowAllAuthorizer, LocalAcls | ClusterAcls | None]:
        """Kafka's StandardAuthorizer over the store's ACLs when configured, else allow-all."""
        if config.authorizer_class_name != STANDARD_AUTHORIZER:
            return AllowAllAuthorizer(), None
        policy = Policy(super_users(config.super_users), config.allow_everyone_if_no_acl_found)
        authorizer = AclAuthorizer(policy, metrics.authorization_denied)
        if self.cluster is not None:
            return authorizer, ClusterAcls(self.cluster.store, authorizer)
        return authorizer, LocalAcls(self.store, authorizer)

    def _state_sources(self) -> StateSources:
        cluster = self.cluster
        return StateSources(
            partitions=self.replicas.all_partitions, connections=lambda: self._slots.quotas.total,
            connections_by_listener=self._connections_by_listener,
            transactions=self.transactions.transactions, group_states=self.groups.group_states,
            controller=lambda: controller_status(cluster),
        )

    def _apply_dynamic_configs(self) -> None:
        """Dynamic broker configs changed: every log takes the config its topic now resolves to
        (topic overrides still win), and the acceptors the connection limits."""
        self.log_manager.default_config = LogConfig.from_properties(self.config.explicit, {})
        for topic in self.topics.all().values():
            self.replicas.update_config(topic.name, self.topics.log_config(topic))
        self._slots.update(ConnectionLimits.current(self.config))

    def _topic_overrides(self) -> dict[str, dict[str, str]]:
        if self.cluster is not None:
            return {name: r.configs for name, r in self.cluster.store.image.topics.items()}
        return {name: topic.configs for name, topic in self.store.topics().items()}

    def _topic_manager(self) -> TopicManager:
        if self.cluster is None:
            return TopicManager(self.config, self.store, self.replicas)
        c = self.cluster
        return ClusterTopicManager(self.config, c.store, self.replicas, c.controller, c.channel)

    def _cluster_roles(self) -> ClusterRoles | None:
        if self.cluster is None:
            return None
        explicit = self.config.explicit
        return ClusterRoles(
            self.cluster.store, self.replicas,
            log_config=lambda record: LogConfig.from_properties(explicit, record.configs),
            now_ms=now_ms, replica_lag_ms=self.config.replica_lag_time_max_ms,
            fetch_max_wait_ms=self.config.replica_fetch_wait_max_ms,
            security=self.client_security,
        )

    def _metadata_view(self) -> Cluster:
        ad = self.config.advertised
        me = BrokerInfo(self.node_id, ad.host, ad.port, self.config.broker_rack or None, self._endpoints())
        if self.cluster is not None:
            store = self.cluster.store
            return ClusterView(lambda: store.image, me, self.cluster_id)

        def epoch_of(topic: str, index: int) -> int:
            part = self.replicas.partition(topic, index)
            return part.leader_epoch if part is not None else 0

        return SingleNodeView(me, epoch_of, self.replicas.topic_change, self.cluster_id)

    def _endpoints(self) -> tuple[tuple[str, str, int], ...]:
        return tuple((name, at.host, at.port) for name, at in self.config.advertised_listeners.items())

    @property
    def cluster_id(self) -> str:
        return str(self.log_manager.cluster_id)

    async def start(self) -> None:
        self.topics.open_all()
        if self.cluster is not None:
            await self._join_cluster(self.cluster)
        await self.transactions.start()
        await self.groups.start()
        await self.metrics.start(self.cluster.store if self.cluster is not None else None, self.node_id)
        self.hanging.start()
        if self.cleaner.config.enable:
            self.cleaner.start(asyncio.get_running_loop())
        for name, sock in self._sockets.items():
            acceptor = Acceptor(name, sock, self._slots, self._security[name].tls, self._on_connect)
            acceptor.start()
            self._acceptors.append(acceptor)
        log.info(
            "broker %d serving on %s, cluster %s, data in %s", self.node_id, self._describe_listeners(),
            self.cluster_id, ",".join(str(d) for d in self.config.log_dirs),
        )

    def _describe_listeners(self) -> str:
        """e.g. "127.0.0.1:9092 (advertised 127.0.0.1:9092)", names added when there are several."""
        listeners, advertised = self.config.listeners, self.config.advertised_listeners
        parts = []
        for name, at in listeners.items():
            ad = advertised.get(name)
            shown = f"{at.host}:{at.port} (advertised {ad.host}:{ad.port})" if ad else f"{at.host}:{at.port}"
            parts.append(shown if len(listeners) == 1 else f"{name} {shown}")
        return ", ".join(parts)

    def _connections_by_listener(self) -> dict[tuple[str, str], int]:
        """Open connections by (listener, security protocol), for the metrics."""
        by_listener = self._slots.quotas.by_listener
        return {(name, self._security[name].protocol): n for name, n in by_listener.items() if n}

    async def _join_cluster(self, cluster: ClusterMembership) -> None:
        """Register, reserve producer ids, then take the partitions the image gives this broker."""
        advertised = self.config.advertised
        await cluster.register(advertised.host, advertised.port, self.config.broker_rack or None,
                               self._endpoints(), self.log_manager.data_dir_id)
        assert self._prefetched is not None and self.roles is not None
        await self._prefetched.start()
        self.roles.start()

    async def _on_connect(
        self, listener: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        metrics.connection_opened(listener, self._security[listener].protocol)
        connection = Connection(self.services, reader, writer, listener, self._security[listener])
        if connection.debug:
            request_log.opened(connection.peer)
        try:
            await connection.run()
        except asyncio.CancelledError:
            pass  # shutdown closes open connections; nothing to report
        finally:
            if connection.debug:
                request_log.closed(connection.peer, connection.requests)

    async def run_until_stopped(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stopping.set)
        background = [asyncio.create_task(self._housekeeping()), asyncio.create_task(watch_loop())]
        await self._stopping.wait()
        for task in background:
            task.cancel()
        await self.stop()

    async def _housekeeping(self) -> None:
        """Time-based flush, checkpoints and retention."""
        flush_every = self.config.log_flush_scheduler_interval_ms / 1000
        retention_every = self.config.log_retention_check_interval_ms
        checkpoint_every = self.config.log_flush_offset_checkpoint_interval_ms
        last_retention = last_checkpoint = now_ms()
        while True:
            await asyncio.sleep(flush_every)
            now = now_ms()
            self.log_manager.flush_due(now)
            if now - last_retention >= retention_every:
                self.log_manager.cleanup(now)
                last_retention = now
            if now - last_checkpoint >= checkpoint_every:
                self.log_manager.checkpoint()
                last_checkpoint = now

    async def stop(self) -> None:
        """Each step is bounded, so a stuck one cannot keep the logs from closing cleanly."""
        log.info("broker %d shutting down", self.node_id)
        connections = [task for acceptor in self._acceptors for task in acceptor.tasks]
        for acceptor in self._acceptors:
            acceptor.close()
        for task in connections:
            task.cancel()
        steps: list[tuple[str, Awaitable[Any]]] = [
            ("connections", asyncio.gather(*connections, return_exceptions=True)),
            ("log cleaner", self.cleaner.stop()),
            ("metrics", self.metrics.stop()),
            ("hanging-transaction check", self.hanging.stop()),
            ("transaction coordinator", self.transactions.stop()),
            ("group coordinator", self.groups.stop()),
        ]
        if self.roles is not None:
            steps.append(("replication", self.roles.stop()))
        if self._prefetched is not None:
            steps.append(("producer id blocks", self._prefetched.stop()))
        if self.cluster is not None:
            steps.append(("cluster membership", self.cluster.close()))
        for name, step in steps:
            await _bounded(name, step)
        self.log_manager.shutdown()
        log.info("broker %d stopped cleanly", self.node_id)


def _cleaner_config(config: BrokerConfig) -> CleanerConfig:
    return CleanerConfig(
        enable=config.log_cleaner_enable,
        io_max_bytes_per_second=config.log_cleaner_io_max_bytes_per_second,
        dedupe_buffer_size=config.log_cleaner_dedupe_buffer_size,
        io_buffer_load_factor=config.log_cleaner_io_buffer_load_factor,
        backoff_ms=config.log_cleaner_backoff_ms,
    )


SHUTDOWN_STEP_TIMEOUT_S = 5.0


async def _bounded(name: str, step: Awaitable[Any]) -> None:
    try:
        await asyncio.wait_for(step, SHUTDOWN_STEP_TIMEOUT_S)
    except TimeoutError:
        log.warning("shutdown: %s did not stop within %.0f s; going on", name, SHUTDOWN_STEP_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - shutdown goes on whatever one step raised
        log.warning("shutdown: stopping %s failed: %r", name, exc)
