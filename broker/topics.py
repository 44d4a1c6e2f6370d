"""Topic lifecycle: create (explicit or automatic), delete, add partitions, configs.

Results are (ErrorCode, message) values the handlers put on the wire.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from broker.config import BrokerConfig
from broker.metadata import LocalMetadataStore, TopicMetadata, topic_name_error
from broker.replica_manager import ReplicaManager
from protocol.errors import ErrorCode
from storage.log_config import LogConfig, validate_topic_config

log = logging.getLogger(__name__)

MAX_PARTITIONS = 10_000


@dataclass(frozen=True, slots=True)
class TopicResult:
    error: ErrorCode
    message: str | None = None
    topic: TopicMetadata | None = None


class TopicManager:
    def __init__(
        self, config: BrokerConfig, store: LocalMetadataStore, replicas: ReplicaManager
    ) -> None:
        self.config = config
        self.store = store
        self.replicas = replicas

    def log_config(self, topic: TopicMetadata) -> LogConfig:
        return LogConfig.from_properties(self.config.explicit, topic.configs)

    def open_all(self) -> None:
        """Become leader of every partition the store lists (single node).

        A log on disk whose topic the store no longer has (a crash in the middle
        of a delete) is removed.
        """
        topics = self.store.topics()
        for name, partitions in self.replicas.log_manager.topics().items():
            for index in partitions:
                if name not in topics or index >= topics[name].partitions:
                    log.warning("removing log %s-%d of a deleted topic", name, index)
                    self.replicas.log_manager.delete_log(name, index)
        for topic in topics.values():
            self._open_partitions(topic, 0)

    def _open_partitions(self, topic: TopicMetadata, first: int) -> None:
        config = self.log_config(topic)
        for index in range(first, topic.partitions):
            self.replicas.make_leader(topic.name, index, config)

    def get(self, name: str) -> TopicMetadata | None:
        return self.store.topic(name)

    def by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        return self.store.topic_by_id(topic_id)

    def all(self) -> dict[str, TopicMetadata]:
        return self.store.topics()

    def create(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str | None],
        validate_only: bool = False,
    ) -> TopicResult:
        checked = self._check_new(name, partitions, replication_factor, configs)
        if checked.error != ErrorCode.NONE:
            return checked
        assert checked.topic is not None
        if not validate_only:
            self.store.put_topic(checked.topic)
            self._open_partitions(checked.topic, 0)
            log.info("created topic %s with %d partitions", name, checked.topic.partitions)
        return checked

    def _check_new(
        self, name: str, partitions: int, rf: int, configs: Mapping[str, str | None]
    ) -> TopicResult:
        problem = topic_name_error(name)
        if problem:
            return TopicResult(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
        if self.store.topic(name) is not None:
            return TopicResult(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        partitions = self.config["num.partitions"] if partitions == -1 else partitions
        rf = self.config["default.replication.factor"] if rf == -1 else rf
        if not 0 < partitions <= MAX_PARTITIONS:
            return TopicResult(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be positive.")
        if rf <= 0:
            return TopicResult(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be positive.")
        if rf > 1:
            return TopicResult(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Replication factor: {rf} larger than available brokers: 1.",
            )
        overrides = {}
        for key, value in configs.items():
            if value is None:
                return TopicResult(ErrorCode.INVALID_CONFIG, f"Null value for config {key}")
            problem = validate_topic_config(key, value)
            if problem:
                return TopicResult(ErrorCode.INVALID_CONFIG, problem)
            overrides[key] = value
        topic = TopicMetadata(name, uuid.uuid4(), partitions, rf, overrides)
        return TopicResult(ErrorCode.NONE, None, topic)

    def create_internal(
        self, name: str, partitions: int, replication_factor: int, configs: Mapping[str, str]
    ) -> TopicResult:
        """An internal topic (`__transaction_state`, `__consumer_offsets`) on first use."""
        return self.create(name, partitions, min(replication_factor, 1), configs)

    def auto_create(self, name: str) -> TopicResult:
        if not self.config["auto.create.topics.enable"]:
            return TopicResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return self.create(name, -1, -1, {})

    def delete(self, name: str) -> TopicResult:
        topic = self.store.topic(name)
        if topic is None:
            return TopicResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if not self.config["delete.topic.enable"]:
            return TopicResult(ErrorCode.TOPIC_DELETION_DISABLED)
        self.store.delete_topic(name)
        self.replicas.remove_topic(name)
        log.info("deleted topic %s", name)
        return TopicResult(ErrorCode.NONE, None, topic)

    def add_partitions(self, name: str, count: int, validate_only: bool) -> TopicResult:
        topic = self.store.topic(name)
        if topic is None:
            return TopicResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        if count <= topic.partitions:
            return TopicResult(
                ErrorCode.INVALID_PARTITIONS,
                f"Topic currently has {topic.partitions} partitions, {count} would not be an increase.",
            )
        if count > MAX_PARTITIONS:
            return TopicResult(ErrorCode.INVALID_PARTITIONS, "Too many partitions.")
        if not validate_only:
            old = topic.partitions
            topic = self.store.set_partitions(name, count)
            self._open_partitions(topic, old)
            log.info("topic %s now has %d partitions", name, count)
        return TopicResult(ErrorCode.NONE, None, topic)

    def set_configs(self, name: str, configs: dict[str, str]) -> None:
        self.store.set_configs(name, configs)
        topic = self.store.topic(name)
        assert topic is not None
        self.replicas.update_config(name, self.log_config(topic))
