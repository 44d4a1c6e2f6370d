"""Topics in cluster mode: read from the cluster image, changed only by the controller.

`ClusterTopicManager` keeps TopicManager's checks (Kafka's validation, the
partition limit) and its read side, with the image as the store. Changes run on
the controller broker: CreateTopics and DeleteTopics that reach another broker
are forwarded there (handlers/topics.py); automatic and internal topic creation
starts the change in the background and answers LEADER_NOT_AVAILABLE meanwhile,
as Kafka does. Which broker then hosts, leads and follows each partition is
ClusterRoles' business.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any

from broker.cluster.controller import ClusterController
from broker.cluster.forwarding import ControllerChannel
from broker.cluster.placement import PlacementError
from broker.cluster.topic_manager import (
    MAX_RECORDS_PER_REQUEST,
    TOO_LARGE_MESSAGE,
    NewTopic,
    TopicManager,
    TopicResult,
)
from broker.config import BrokerConfig
from broker.net.client import BrokerUnreachable
from broker.replication.replica_manager import ReplicaManager
from broker.store.etcd_store import EtcdMetadataStore
from broker.store.image import ClusterImage, TopicRecord
from broker.store.local_store import TopicMetadata
from protocol.errors import ErrorCode
from protocol.messages import REQUESTS
from protocol.types import TopicPartition

log = logging.getLogger(__name__)

VISIBLE_TIMEOUT_S = 10.0
CONFIG_ATTEMPTS, CONFIG_RETRY_S = 5, 0.1
CREATE_TOPICS, CREATE_TOPICS_VERSION = 19, 5


def topic_metadata(record: TopicRecord) -> TopicMetadata:
    return TopicMetadata(record.name, record.topic_id, record.partitions, record.replication_factor,
                         dict(record.configs))


class ImageTopics:
    """The image's topics through the store interface TopicManager reads."""

    def __init__(self, store: EtcdMetadataStore) -> None:
        self._store = store

    def topics(self) -> dict[str, TopicMetadata]:
        return {name: topic_metadata(r) for name, r in self._store.image.topics.items()}

    def topic(self, name: str) -> TopicMetadata | None:
        record = self._store.image.topics.get(name)
        return topic_metadata(record) if record is not None else None

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        found = next((r for r in self._store.image.topics.values() if r.topic_id == topic_id), None)
        return topic_metadata(found) if found is not None else None

    def put_topic(self, topic: TopicMetadata) -> None:
        raise NotImplementedError("cluster topics change through the controller")

    delete_topic = set_partitions = set_configs = put_topic


class ClusterTopicManager(TopicManager):
    def __init__(
        self, config: BrokerConfig, store: EtcdMetadataStore, replicas: ReplicaManager,
        controller: ClusterController, channel: ControllerChannel,
    ) -> None:
        super().__init__(config, ImageTopics(store), replicas)  # type: ignore[arg-type]
        self.etcd = store
        self.controller = controller
        self.channel = channel
        self._background: set[asyncio.Task[Any]] = set()
        self._waiting_logged: set[TopicPartition] = set()

    def broker_count(self) -> int:
        return len(self.etcd.image.brokers)

    def registered_brokers(self) -> frozenset[int]:
        return frozenset(self.etcd.image.brokers)

    def open_all(self) -> None:
        """Nothing to open up front: the image decides (ClusterRoles)."""

    @property
    def is_controller(self) -> bool:
        return self.controller.active

    async def create_topics(self, specs: Sequence[NewTopic], validate_only: bool) -> list[TopicResult]:
        """On the controller: Kafka's checks, then each topic written to etcd at once."""
        async with self._changes:
            checked = [self._within_limit(self._check_new(spec)) for spec in specs]
            records = sum(1 + len(r.topic.configs) + r.topic.partitions for r in checked if r.topic)
            if records > MAX_RECORDS_PER_REQUEST:
                return [TopicResult(ErrorCode.POLICY_VIOLATION, TOO_LARGE_MESSAGE) for _ in specs]
            if validate_only:
                return checked
            return [await self._create_checked(result) for result in checked]

    async def _create_checked(self, checked: TopicResult) -> TopicResult:
        topic = checked.topic
        if topic is None:
            return checked
        try:
            created = await self.controller.create_topic(
                topic.name, topic.partitions, topic.replication_factor, dict(topic.configs),
                checked.assignment,
            )
        except PlacementError as exc:
            return TopicResult(ErrorCode.INVALID_REPLICATION_FACTOR, str(exc))
        if not created:
            return TopicResult(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{topic.name}' already exists.")
        await self.etcd.wait_for(lambda image: topic.name in image.topics, VISIBLE_TIMEOUT_S)
        log.info("created topic %s with %d partitions, replication factor %d",
                 topic.name, topic.partitions, topic.replication_factor)
        return TopicResult(ErrorCode.NONE, None, self.get(topic.name) or topic)

    def create(
        self, name: str, partitions: int, replication_factor: int,
        configs: Mapping[str, str | None], validate_only: bool = False,
    ) -> TopicResult:
        """Automatic and internal topics: started in the background; LEADER_NOT_AVAILABLE meanwhile."""
        checked = self._within_limit(self._check_new(NewTopic(name, partitions, replication_factor, configs)))
        if checked.error == ErrorCode.INVALID_REPLICATION_FACTOR and not validate_only:
            # As Kafka's controller: the creation fails until enough brokers are alive; the
            # client only sees a retriable error meanwhile.
            self._too_few_brokers(name, str(checked.message))
            return TopicResult(ErrorCode.LEADER_NOT_AVAILABLE, f"topic {name} waits for enough live brokers")
        if checked.error != ErrorCode.NONE or validate_only:
            return checked
        if self.is_controller:
            self._spawn(self.create_topics([NewTopic(name, partitions, replication_factor, configs)], False))
        else:
            self._spawn(self._forward_create(name, partitions, replication_factor, configs))
        return TopicResult(ErrorCode.LEADER_NOT_AVAILABLE, f"topic {name} is being created")

    def create_internal(
        self, name: str, partitions: int, replication_factor: int, configs: Mapping[str, str]
    ) -> TopicResult:
        """`__consumer_offsets` / `__transaction_state` with their own replication factor, only
        once that many brokers are alive (COORDINATOR_NOT_AVAILABLE until then, as Kafka)."""
        live = self.broker_count()
        if replication_factor > live:
            self._too_few_brokers(name, f"{live} broker(s) alive, replication factor {replication_factor}")
            return TopicResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{name} waits for enough live brokers")
        return self.create(name, partitions, replication_factor, configs)

    def _too_few_brokers(self, name: str, why: str) -> None:
        """One log line per topic and number of live brokers (clients retry every few ms)."""
        seen = (name, self.broker_count())
        if seen not in self._waiting_logged:
            self._waiting_logged.add(seen)
            log.info("topic %s not created yet: %s (it will be once enough brokers are alive)", name, why)

    async def _forward_create(
        self, name: str, partitions: int, rf: int, configs: Mapping[str, str | None]
    ) -> None:
        cls = REQUESTS[CREATE_TOPICS]
        topic = cls.CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=rf, assignments=[],
            configs=[cls.CreatableTopic.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()],
        )
        request = cls(topics=[topic], timeout_ms=30000, validate_only=False)
        try:
            await self.channel.call(request, CREATE_TOPICS_VERSION)
        except BrokerUnreachable as exc:
            log.info("creating topic %s: controller not reachable (%s); a later request retries", name, exc)

    async def delete(self, name: str) -> TopicResult:
        async with self._changes:
            topic = self.get(name)
            if topic is None:
                return TopicResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            if not self.config.delete_topic_enable:
                return TopicResult(ErrorCode.TOPIC_DELETION_DISABLED)
            await self.etcd.delete_topic(name)
            await self.etcd.wait_for(lambda image: name not in image.topics, VISIBLE_TIMEOUT_S)
            log.info("deleted topic %s", name)
            return TopicResult(ErrorCode.NONE, None, topic)

    async def set_configs(self, name: str, configs: dict[str, str]) -> tuple[ErrorCode, str | None]:
        """A compare-and-swap of the topic record in etcd (from any broker: the controller
        does not place anything here); every broker hosting the topic applies it (roles)."""
        def visible(image: ClusterImage) -> bool:
            return _configs_of(image.topics.get(name)) == configs

        for _ in range(CONFIG_ATTEMPTS):
            record = self.etcd.image.topics.get(name)
            if record is None:
                return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist"
            if await self.etcd.set_topic_configs(record, configs):
                await self.etcd.wait_for(visible, VISIBLE_TIMEOUT_S)
                log.info("topic %s: configs now %s", name, configs)
                return ErrorCode.NONE, None
            await asyncio.sleep(CONFIG_RETRY_S)  # the image is behind etcd: let it catch up
        return ErrorCode.REQUEST_TIMED_OUT, f"Topic {name} kept changing while its configs were altered"

    async def _grow(self, checked: TopicResult, count: int) -> TopicResult:
        """On the controller: the new partitions placed and written to etcd at once."""
        old = checked.topic
        assert old is not None
        try:
            grown = await self.controller.add_partitions(old.name, count, checked.assignment)
        except PlacementError as exc:
            return TopicResult(ErrorCode.INVALID_REPLICATION_FACTOR, str(exc))
        if not grown:
            return TopicResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{old.name}' does not exist.")
        await self.etcd.wait_for(lambda image: len(image.partitions_of(old.name)) >= count, VISIBLE_TIMEOUT_S)
        log.info("topic %s now has %d partitions", old.name, count)
        return TopicResult(ErrorCode.NONE, None, self.get(old.name))

    def _spawn(self, coro: Coroutine[Any, Any, object]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)


def _configs_of(record: TopicRecord | None) -> dict[str, str] | None:
    return None if record is None else record.configs
