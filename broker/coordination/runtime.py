"""What both coordinator edges share: their internal topic, created on first use; the
leadership of its partitions, followed (a partition led from a new epoch is loaded in the
background, a partition lost is unloaded); and their background tasks."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from broker.api.services import Topics
    from broker.coordination.coordinator_log import CoordinatorLog
    from broker.coordination.internal_topics import InternalRecord
    from broker.replication.replica_manager import Partition


@dataclass(frozen=True, slots=True)
class InternalTopic:
    name: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str]


class Loadable(Protocol):
    """A coordinator edge as its runtime loads and unloads its partitions."""

    def coordinator_epoch(self, index: int) -> int | None: ...

    def begin_load(self, index: int, epoch: int) -> None: ...

    def replay_loaded(self, record: InternalRecord, index: int, epoch: int) -> None: ...

    def loaded(self, index: int, epoch: int, started: float) -> None: ...

    def unload(self, index: int) -> None: ...


class CoordinatorRuntime:
    def __init__(self, log: CoordinatorLog, topics: Topics, topic: InternalTopic, edge: Loadable) -> None:
        self.log = log
        self.topics = topics
        self.topic = topic
        self.edge = edge
        self._tasks: set[asyncio.Task[object]] = set()

    def ensure_topic(self) -> ErrorCode:
        """FindCoordinator and the coordinators' APIs: create the internal topic on first use
        (its partitions then load as this broker, or another, becomes their leader)."""
        t = self.topic
        if self.topics.get(t.name) is not None:
            return ErrorCode.NONE
        result = self.topics.create_internal(t.name, t.partitions, t.replication_factor, t.configs)
        if result.error not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return ErrorCode.NONE

    def on_leadership(self, part: Partition, leading: bool) -> None:
        """A partition of the internal topic led from a new epoch loads in the background
        (its keys answer COORDINATOR_LOAD_IN_PROGRESS meanwhile); one lost is unloaded
        (NOT_COORDINATOR)."""
        if part.topic != self.topic.name:
            return
        if not leading:
            self.edge.unload(part.index)
            return
        index, epoch = part.index, part.leader_epoch
        if self.edge.coordinator_epoch(index) == epoch:
            return
        self.edge.begin_load(index, epoch)
        work = self.log.start_load(part, lambda r: self.edge.replay_loaded(r, index, epoch),
                                   lambda started: self.edge.loaded(index, epoch, started))
        if work is not None:
            self.spawn(work)

    def spawn(self, work: Coroutine[Any, Any, object]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
