"""Topic lifecycle: create (explicit or automatic), delete, add partitions, configs.

Results are (ErrorCode, message) values the handlers put on the wire.

Creating partitions is all-or-nothing in the metadata store: every partition's log
is created on disk first (in chunks, yielding to the event loop between them), and
only then is the topic or its new partition count recorded. A failure half-way
removes the logs it created; a crash half-way leaves logs the store does not
know, which start-up removes (`open_all`). Topic changes requested by clients run
one at a time, as on Kafka's controller.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field

from broker.base.faults import crash_point
from broker.cluster.placement import Assignment, Refused, more_assignment, topic_assignment
from broker.config import BrokerConfig
from broker.replication.replica_manager import ReplicaManager
from broker.store.local_store import LocalMetadataStore, TopicMetadata, topic_name_error
from protocol.errors import ErrorCode
from protocol.internal_topics import INTERNAL_TOPICS
from protocol.types import TopicPartition
from storage.log_config import LogConfig, validate_topic_config

log = logging.getLogger(__name__)

# Kafka's controller refuses a request that would write more metadata records than
# this (QuorumController.MAX_RECORDS_PER_USER_OP): one per topic, per config, per partition.
MAX_RECORDS_PER_REQUEST = 10_000
TOO_LARGE_MESSAGE = "Unable to perform excessively large batch operation."
CREATE_CHUNK = 16  # partition logs created between two yields to the event loop
BROKER_COUNT = 1  # single node (the cluster's ClusterTopicManager counts live brokers)


@dataclass(frozen=True, slots=True)
class TopicResult:
    error: ErrorCode
    message: str | None = None
    topic: TopicMetadata | None = None
    assignment: Assignment | None = None  # the replicas a request asked for, when it did


@dataclass(frozen=True, slots=True)
class NewTopic:
    """One topic of a CreateTopics request (-1: the broker's default)."""

    name: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str | None] = field(default_factory=dict)
    assignments: tuple[tuple[int, tuple[int, ...]], ...] = ()  # manual: (partition, broker ids)


class TopicManager:
    def __init__(
        self, config: BrokerConfig, store: LocalMetadataStore, replicas: ReplicaManager
    ) -> None:
        self.config = config
        self.store = store
        self.replicas = replicas
        self._changes = asyncio.Lock()
        self._creating: dict[str, int] = {}  # topic → partitions whose logs are being built
        self._deleting: set[str] = set()  # deleted topics whose logs are being removed

    def log_config(self, topic: TopicMetadata) -> LogConfig:
        return LogConfig.from_properties(self.config.explicit, topic.configs)

    def open_all(self) -> None:
        """Become leader of every partition the store lists (single node).

        A log on disk whose topic or partition the store does not have (a crash in
        the middle of a delete or of a creation) is removed.
        """
        topics = self.store.topics()
        for name, partitions in self.replicas.log_manager.topics().items():
            known = topics[name].partitions if name in topics else 0
            stray = [index for index in partitions if index >= known]
            if stray:
                log.warning(
                    "removing %d log(s) of topic %s that the metadata does not list (from partition %d)",
                    len(stray), name, stray[0],
                )
                self.replicas.log_manager.delete_logs(name, stray)
        for topic in topics.values():
            self._open_partitions(topic, 0)

    def _open_partitions(self, topic: TopicMetadata, first: int) -> None:
        config = self.log_config(topic)
        for index in range(first, topic.partitions):
            self.replicas.make_leader(topic.name, index, config)

    def broker_count(self) -> int:
        return BROKER_COUNT

    def registered_brokers(self) -> frozenset[int]:
        """The node ids a manual replica assignment may name (one broker: its own id)."""
        return frozenset({self.replicas.node_id})

    def get(self, name: str) -> TopicMetadata | None:
        return self.store.topic(name)

    def by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        return self.store.topic_by_id(topic_id)

    def all(self) -> dict[str, TopicMetadata]:
        return self.store.topics()

    # -- checks ---------------------------------------------------------------

    def _total_partitions(self) -> int:
        known = sum(t.partitions for t in self.store.topics().values())
        return known + sum(self._creating.values())

    def _limit_error(self, name: str, added: int, planned: int = 0) -> TopicResult | None:
        """Gregor's max.partitions guard (internal topics are always created)."""
        limit = self.config.max_partitions
        total = self._total_partitions() + planned + added
        if name in INTERNAL_TOPICS or total <= limit:
            return None
        return TopicResult(
            ErrorCode.POLICY_VIOLATION,
            f"Adding {added} partition(s) to topic {name} would bring this broker to {total} "
            f"partitions, above max.partitions={limit}.",
        )

    def _check_new(self, spec: NewTopic) -> TopicResult:
        """Kafka's checks, in Kafka's order (Gregor's partition limit comes after)."""
        name = spec.name
        problem = topic_name_error(name)
        if problem:
            return TopicResult(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
        if self.store.topic(name) is not None or name in self._creating or name in self._deleting:
            return TopicResult(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        overrides, config_error = _config_overrides(spec.configs)
        if config_error is not None:
            return config_error
        if spec.assignments:
            return self._check_manual(spec, overrides)
        if spec.replication_factor < -1 or spec.replication_factor == 0:
            return TopicResult(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                "Replication factor must be larger than 0, or -1 to use the default value.",
            )
        if spec.partitions < -1 or spec.partitions == 0:
            return TopicResult(
                ErrorCode.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value."
            )
        partitions = self.config.num_partitions if spec.partitions == -1 else spec.partitions
        rf = spec.replication_factor
        if rf == -1:
            rf = self.config.default_replication_factor
        brokers = self.broker_count()
        if rf > brokers:
            return TopicResult(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Unable to replicate the partition {rf} time(s): The target replication factor of {rf} "
                f"cannot be reached because only {brokers} broker(s) are registered.",
            )
        return TopicResult(ErrorCode.NONE, None, TopicMetadata(name, uuid.uuid4(), partitions, rf, overrides))

    def _check_manual(self, spec: NewTopic, overrides: dict[str, str]) -> TopicResult:
        placed = topic_assignment(
            spec.assignments, spec.partitions, spec.replication_factor, self.registered_brokers()
        )
        if isinstance(placed, Refused):
            return TopicResult(placed.error, placed.message)
        topic = TopicMetadata(spec.name, uuid.uuid4(), len(placed), len(placed[0]), overrides)
        return TopicResult(ErrorCode.NONE, None, topic, placed)

    def _within_limit(self, checked: TopicResult, planned: int = 0) -> TopicResult:
        """``checked`` unless adding its partitions (after ``planned`` others of the same
        request) would pass max.partitions."""
        if checked.topic is None:
            return checked
        return self._limit_error(checked.topic.name, checked.topic.partitions, planned) or checked

    # -- creation -------------------------------------------------------------

    def create(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str | None],
        validate_only: bool = False,
    ) -> TopicResult:
        """Create one topic at once (automatic creation and internal topics: a few
        partitions); clients' CreateTopics go through ``create_topics``."""
        checked = self._within_limit(self._check_new(NewTopic(name, partitions, replication_factor, configs)))
        if checked.error != ErrorCode.NONE or validate_only:
            return checked
        assert checked.topic is not None
        build = self._build_logs(checked.topic, 0)
        try:
            for _chunk in build:
                pass
        except OSError as exc:
            return _storage_failure(name, exc)
        return self._commit_new(checked.topic)

    async def create_topics(self, specs: Sequence[NewTopic], validate_only: bool) -> list[TopicResult]:
        """CreateTopics: each topic checked and created on its own (its own error);
        a request over Kafka's record limit fails whole with POLICY_VIOLATION."""
        async with self._changes:
            checked = [self._check_new(spec) for spec in specs]
            records = sum(1 + len(r.topic.configs) + r.topic.partitions for r in checked if r.topic)
            if records > MAX_RECORDS_PER_REQUEST:
                return [TopicResult(ErrorCode.POLICY_VIOLATION, TOO_LARGE_MESSAGE) for _ in specs]
            planned = 0
            for i, result in enumerate(checked):
                checked[i] = self._within_limit(result, planned)
                topic = checked[i].topic
                planned += topic.partitions if topic is not None else 0
            if validate_only:
                return checked
            return [await self._create_checked(result) for result in checked]

    async def _create_checked(self, checked: TopicResult) -> TopicResult:
        if checked.topic is None:
            return checked
        try:
            await _drive(self._build_logs(checked.topic, 0))
        except OSError as exc:
            return _storage_failure(checked.topic.name, exc)
        return self._commit_new(checked.topic)

    def _build_logs(self, topic: TopicMetadata, first: int) -> Generator[None, None, None]:
        """Create the logs of partitions [first, topic.partitions) a chunk at a time,
        yielding after each chunk. If anything fails (or the caller stops early), the
        logs created so far are removed and the error propagates."""
        manager = self.replicas.log_manager
        config = self.log_config(topic)
        created: list[int] = []
        self._creating[topic.name] = topic.partitions - first
        try:
            for start in range(first, topic.partitions, CREATE_CHUNK):
                chunk = range(start, min(start + CREATE_CHUNK, topic.partitions))
                manager.create_logs(topic.name, chunk, config, created, sync=False)
                crash_point("topic-create-chunk")
                yield
            manager.sync_log_dirs()  # once for the topic, before the metadata names its logs
        except BaseException:
            log.warning("removing %d new log(s) of topic %s after a failure", len(created), topic.name)
            manager.delete_logs(topic.name, created)
            raise
        finally:
            self._creating.pop(topic.name, None)

    def _commit_new(self, topic: TopicMetadata) -> TopicResult:
        """Record the topic (every log exists), then lead its partitions."""
        try:
            self.store.put_topic(topic)
        except OSError as exc:
            self.replicas.log_manager.delete_logs(topic.name, range(topic.partitions))
            return _storage_failure(topic.name, exc)
        crash_point("topic-create-recorded")
        self._open_partitions(topic, 0)
        log.info("created topic %s with %d partitions", topic.name, topic.partitions)
        return TopicResult(ErrorCode.NONE, None, topic)

    def create_internal(
        self, name: str, partitions: int, replication_factor: int, configs: Mapping[str, str]
    ) -> TopicResult:
        """An internal topic (`__transaction_state`, `__consumer_offsets`) on first use."""
        return self.create(name, partitions, min(replication_factor, 1), configs)

    def auto_create(self, name: str) -> TopicResult:
        if not self.config.auto_create_topics_enable:
            return TopicResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return self.create(name, -1, -1, {})

    # -- deletion and more partitions ----------------------------------------

    async def delete(self, name: str) -> TopicResult:
        async with self._changes:
            topic = self.store.topic(name)
            if topic is None:
                return TopicResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            if not self.config.delete_topic_enable:
                return TopicResult(ErrorCode.TOPIC_DELETION_DISABLED)
            self.store.delete_topic(name)
            removed = self.replicas.remove_topic(name)
            crash_point("topic-delete-recorded")
            self._deleting.add(name)
            try:
                await _drive(self._delete_logs(name, removed))
            finally:
                self._deleting.discard(name)
            log.info("deleted topic %s", name)
            return TopicResult(ErrorCode.NONE, None, topic)

    def _delete_logs(self, name: str, partitions: list[int]) -> Generator[None, None, None]:
        """Delete the logs of a topic the store no longer has, a chunk at a time (a
        crash half-way leaves logs that start-up removes)."""
        for start in range(0, len(partitions), CREATE_CHUNK):
            self.replicas.log_manager.delete_logs(name, partitions[start : start + CREATE_CHUNK])
            yield

    async def add_partitions_many(
        self, wanted: Sequence[TopicPartition], validate_only: bool,
        assignments: Sequence[Sequence[Sequence[int]] | None] | None = None,
    ) -> list[TopicResult]:
        """CreatePartitions: (topic, new total count) each, with the manual replica
        assignment of the new partitions or None; a request adding more partitions than
        Kafka's record limit fails whole with POLICY_VIOLATION."""
        manual = list(assignments) if assignments is not None else [None] * len(wanted)
        async with self._changes:
            checked = [
                self._check_more(name, count, m) for (name, count), m in zip(wanted, manual, strict=True)
            ]
            added = [
                count - r.topic.partitions if r.topic else 0
                for (_, count), r in zip(wanted, checked, strict=True)
            ]
            if sum(added) > MAX_RECORDS_PER_REQUEST:
                return [TopicResult(ErrorCode.POLICY_VIOLATION, TOO_LARGE_MESSAGE) for _ in wanted]
            planned = 0
            for i, ((name, _count), more) in enumerate(zip(wanted, added, strict=True)):
                if checked[i].topic is not None:
                    checked[i] = self._limit_error(name, more, planned) or checked[i]
                    planned += more
            if validate_only:
                return checked
            out = []
            for (_name, count), result in zip(wanted, checked, strict=True):
                out.append(await self._grow(result, count) if result.error == ErrorCode.NONE else result)
            return out

    def _check_more(
        self, name: str, count: int, manual: Sequence[Sequence[int]] | None = None
    ) -> TopicResult:
        """Kafka's checks; the result carries the topic as it is when they pass (and the
        new partitions' replicas when the request assigned them)."""
        topic = self.store.topic(name)
        if topic is None:
            return TopicResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        if count == topic.partitions:
            return TopicResult(ErrorCode.INVALID_PARTITIONS, f"Topic already has {count} partition(s).")
        if count < topic.partitions:
            return TopicResult(
                ErrorCode.INVALID_PARTITIONS,
                f"The topic {name} currently has {topic.partitions} partition(s); "
                f"{count} would not be an increase.",
            )
        if manual is None:
            return TopicResult(ErrorCode.NONE, None, topic)
        placed = more_assignment(manual, count - topic.partitions, topic.replication_factor,
                                 self.registered_brokers())
        if isinstance(placed, Refused):
            return TopicResult(placed.error, placed.message)
        return TopicResult(ErrorCode.NONE, None, topic, placed)

    async def _grow(self, checked: TopicResult, count: int) -> TopicResult:
        old = checked.topic
        assert old is not None
        grown = TopicMetadata(old.name, old.topic_id, count, old.replication_factor, old.configs)
        try:
            await _drive(self._build_logs(grown, old.partitions))
            self.store.set_partitions(old.name, count)
        except OSError as exc:
            self.replicas.log_manager.delete_logs(old.name, range(old.partitions, count))
            return _storage_failure(old.name, exc)
        crash_point("topic-partitions-recorded")
        self._open_partitions(grown, old.partitions)
        log.info("topic %s now has %d partitions", old.name, count)
        return TopicResult(ErrorCode.NONE, None, grown)

    async def set_configs(self, name: str, configs: dict[str, str]) -> tuple[ErrorCode, str | None]:
        """Replace the topic's configs; its logs use them from now on."""
        self.store.set_configs(name, configs)
        topic = self.store.topic(name)
        assert topic is not None
        self.replicas.update_config(name, self.log_config(topic))
        return ErrorCode.NONE, None


async def _drive(steps: Generator[None, None, None]) -> None:
    """Run a chunked job, letting other work run between its chunks; a cancelled job
    is closed at once (which undoes it)."""
    try:
        for _step in steps:
            await asyncio.sleep(0)
    finally:
        steps.close()


def _config_overrides(configs: Mapping[str, str | None]) -> tuple[dict[str, str], TopicResult | None]:
    overrides = {}
    for key, value in configs.items():
        if value is None:
            return {}, TopicResult(ErrorCode.INVALID_CONFIG, f"Null value for config {key}")
        problem = validate_topic_config(key, value)
        if problem:
            return {}, TopicResult(ErrorCode.INVALID_CONFIG, problem)
        overrides[key] = value
    return overrides, None


def _storage_failure(name: str, exc: OSError) -> TopicResult:
    log.error("could not create the partition logs of topic %s: %s", name, exc)
    message = f"Could not create the logs of topic {name}: {exc.strerror or exc}"
    return TopicResult(ErrorCode.KAFKA_STORAGE_ERROR, message)
