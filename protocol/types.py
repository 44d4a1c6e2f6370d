"""The typed vocabulary every layer shares: ids and offsets as `NewType`s (a producer id
cannot be passed where an offset is meant), and a topic partition."""

from __future__ import annotations

import uuid
from enum import IntEnum
from typing import NewType

TopicPartition = tuple[str, int]  # (topic name, partition index)

Offset = NewType("Offset", int)
ProducerId = NewType("ProducerId", int)
ProducerEpoch = NewType("ProducerEpoch", int)
LeaderEpoch = NewType("LeaderEpoch", int)
CoordinatorEpoch = NewType("CoordinatorEpoch", int)
NodeId = NewType("NodeId", int)
TransactionVersion = NewType("TransactionVersion", int)
TopicId = NewType("TopicId", uuid.UUID)

NO_OFFSET = Offset(-1)  # "none": a failed append's offsets, a producer without data

# The transaction.version level that bumps the producer epoch on every EndTxn (KIP-890 part 2);
# its markers carry the bumped epoch, which the partitions check (KIP-1228).
TV2 = TransactionVersion(2)
TV0 = TransactionVersion(0)  # a marker's version when the request has none (WriteTxnMarkers v0-1)


class IsolationLevel(IntEnum):
    """A Fetch's or ListOffsets' isolation level (the wire's int8): read_committed reads up to
    the last stable offset, read_uncommitted up to the high watermark."""

    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1

    @classmethod
    def of(cls, wire: int) -> IsolationLevel:
        """The level a request asks for; any value but 1 reads uncommitted, as Gregor always has."""
        return cls.READ_COMMITTED if wire == cls.READ_COMMITTED else cls.READ_UNCOMMITTED
