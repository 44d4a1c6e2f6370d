"""Transaction states, the legal-transition table and the per-transactional-id metadata.

Facts from Kafka's TransactionState / TransactionMetadata: state ids, the
VALID_PREVIOUS_STATES table, which states may expire, and the epoch rules
(epochs run to Short.MAX_VALUE; a client may not be handed one at or above
Short.MAX_VALUE - 1, so the coordinator can always fence).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import IntEnum

from protocol.transaction_log import TxnLogValue
from protocol.types import ProducerEpoch, ProducerId, TopicPartition

NO_PRODUCER_ID = ProducerId(-1)
NO_PRODUCER_EPOCH = ProducerEpoch(-1)
MAX_EPOCH = 0x7FFF  # Short.MAX_VALUE



class TxnState(IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display_name(self) -> str:
        """The name ListTransactions / DescribeTransactions use ("PrepareCommit", ...)."""
        return _DISPLAY_NAMES[self]

    @classmethod
    def from_display_name(cls, name: str) -> TxnState | None:
        return _BY_DISPLAY_NAME.get(name)

    @property
    def expiration_allowed(self) -> bool:
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)

    @property
    def is_prepare(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


_DISPLAY_NAMES = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_DISPLAY_NAME = {name: state for state, name in _DISPLAY_NAMES.items()}

_S = TxnState
# target state -> states it may be entered from (Kafka's TransactionState.VALID_PREVIOUS_STATES).
# PrepareAbort from Empty / Complete* exists for transaction version 2 (an abort when the
# client is unsure whether a transaction is open).
VALID_PREVIOUS_STATES: dict[TxnState, frozenset[TxnState]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: frozenset(
        {_S.ONGOING, _S.PREPARE_EPOCH_FENCE, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}
    ),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_ABORT, _S.COMPLETE_COMMIT}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}


class IllegalStateTransition(RuntimeError):
    """A transition VALID_PREVIOUS_STATES forbids: a bug, never a client error."""


def check_transition(current: TxnState, target: TxnState) -> None:
    if current not in VALID_PREVIOUS_STATES[target]:
        raise IllegalStateTransition(f"{current.display_name} -> {target.display_name} is not allowed")


def is_epoch_exhausted(epoch: int) -> bool:
    return epoch >= MAX_EPOCH - 1


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    transactional_id: str
    producer_id: ProducerId
    previous_producer_id: ProducerId
    next_producer_id: ProducerId
    producer_epoch: ProducerEpoch
    last_producer_epoch: ProducerEpoch
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    txn_start_ms: int
    last_update_ms: int
    client_transaction_version: int

    def transit(self, state: TxnState, **changes: object) -> TxnMetadata:
        """The metadata after a checked move to ``state``; previous_producer_id becomes the
        current producer id, as in Kafka's prepareTransitionTo."""
        check_transition(self.state, state)
        target = replace(self, state=state, previous_producer_id=self.producer_id, **changes)  # type: ignore[arg-type]
        if target.producer_id < 0:
            raise ValueError(f"illegal producer id {target.producer_id}")
        if state is not TxnState.DEAD and not 0 <= target.producer_epoch <= MAX_EPOCH:
            raise ValueError(f"illegal producer epoch {target.producer_epoch}")
        return target

    def to_log_value(self) -> TxnLogValue:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(self.partitions):
            by_topic.setdefault(topic, []).append(partition)
        partitions = (
            None if self.state is TxnState.EMPTY else tuple((t, tuple(p)) for t, p in by_topic.items())
        )
        return TxnLogValue(
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            timeout_ms=self.timeout_ms,
            status=int(self.state),
            partitions=partitions,
            last_update_ms=self.last_update_ms,
            start_ms=self.txn_start_ms,
            previous_producer_id=self.previous_producer_id,
            next_producer_id=self.next_producer_id,
            client_transaction_version=self.client_transaction_version,
        )

    @classmethod
    def from_log_value(cls, transactional_id: str, value: TxnLogValue) -> TxnMetadata:
        """As Kafka loads a record: lastProducerEpoch is not persisted and comes back as -1."""
        state = TxnState(value.status)
        partitions: frozenset[TopicPartition] = frozenset()
        if state is not TxnState.EMPTY and value.partitions:
            partitions = frozenset((t, p) for t, ids in value.partitions for p in ids)
        return cls(
            transactional_id=transactional_id,
            producer_id=ProducerId(value.producer_id),
            previous_producer_id=ProducerId(value.previous_producer_id),
            next_producer_id=ProducerId(value.next_producer_id),
            producer_epoch=ProducerEpoch(value.producer_epoch),
            last_producer_epoch=NO_PRODUCER_EPOCH,
            timeout_ms=value.timeout_ms,
            state=state,
            partitions=partitions,
            txn_start_ms=value.start_ms,
            last_update_ms=value.last_update_ms,
            client_transaction_version=value.client_transaction_version,
        )
