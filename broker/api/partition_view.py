"""What a handler may see of a partition: a read view of its log (offsets, epochs, batches,
producers, config). A handler changes a partition only through the ReplicaManager
(`services.partitions`: append, markers, DeleteRecords), which handles a failed write and wakes
the waiters; the view has no method that writes. The live `Partition` and its `Log` are the
view's implementation (mypy checks that they satisfy it, below), so reading through the view
costs nothing; `tests/unit/test_broker_layers.py` checks that handlers reach a log only for
what the view declares."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from protocol.types import Offset, ProducerId

if TYPE_CHECKING:
    from broker.replication.replica_manager import Partition
    from storage.log import FetchDataInfo, Log, TimestampOffset
    from storage.log_config import LogConfig
    from storage.producer_state import ProducerStateEntry, ProducerStateInfo


class ProducerStateView(Protocol):
    def last_entry(self, producer_id: ProducerId) -> ProducerStateEntry | None: ...


class LogView(Protocol):
    """The reads of a partition's log that handlers make."""

    @property
    def log_start_offset(self) -> Offset: ...
    @property
    def log_end_offset(self) -> Offset: ...
    @property
    def high_watermark(self) -> Offset: ...
    @property
    def last_stable_offset(self) -> Offset: ...
    @property
    def latest_epoch(self) -> int: ...
    @property
    def size_in_bytes(self) -> int: ...
    @property
    def config(self) -> LogConfig: ...
    @property
    def producer_state(self) -> ProducerStateView: ...

    def read(self, fetch_offset: int, max_bytes: int, max_offset: int, min_one_batch: bool,
             collect_aborted: bool = False) -> FetchDataInfo: ...
    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]: ...
    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None: ...
    def max_timestamp_offset(self) -> TimestampOffset | None: ...
    def active_producers(self) -> list[ProducerStateInfo]: ...


class PartitionView(Protocol):
    """A partition as a handler reads it."""

    @property
    def topic(self) -> str: ...
    @property
    def index(self) -> int: ...
    @property
    def leader_epoch(self) -> int: ...
    @property
    def log(self) -> LogView: ...


# The names of LogView's members: what a handler may reach through `.log` (the layering test).
LOG_VIEW_MEMBERS = frozenset(
    name for name in vars(LogView) if not name.startswith("_")
)

if TYPE_CHECKING:
    def _log_is_a_view(log: Log) -> LogView:
        return log

    def _partition_is_a_view(part: Partition) -> PartitionView:
        return part
