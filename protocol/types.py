"""The typed vocabulary every layer shares: ids and offsets as `NewType`s (a producer id
cannot be passed where an offset is meant), and a topic partition."""

from __future__ import annotations

from typing import NewType

TopicPartition = tuple[str, int]  # (topic name, partition index)

Offset = NewType("Offset", int)
ProducerId = NewType("ProducerId", int)
ProducerEpoch = NewType("ProducerEpoch", int)
LeaderEpoch = NewType("LeaderEpoch", int)
CoordinatorEpoch = NewType("CoordinatorEpoch", int)
NodeId = NewType("NodeId", int)
