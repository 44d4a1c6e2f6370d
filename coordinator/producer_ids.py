"""Producer-id allocation in blocks (Kafka's ProducerIdManager, without the I/O).

A block of ids is reserved in the metadata store before any id of it is handed
out, so a restart (or, later, another broker) never reissues an id: the store
only ever moves its next-block pointer forward.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

BLOCK_SIZE = 1000


class ProducerIdsUnavailable(Exception):
    """No block of ids can be had now (the metadata store is out of reach). Kafka's coordinator
    answers COORDINATOR_LOAD_IN_PROGRESS then, and the client tries again."""


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    first: int
    size: int

    @property
    def last(self) -> int:
        return self.first + self.size - 1


class ProducerIdManager:
    """Hands out ids from the current block; asks `reserve` for the next one (which may raise
    ProducerIdsUnavailable: no id is handed out, the next call asks again)."""

    def __init__(self, reserve: Callable[[int], ProducerIdBlock]) -> None:
        self._reserve = reserve
        self._block: ProducerIdBlock | None = None
        self._next = 0

    def generate(self) -> int:
        if self._block is None or self._next > self._block.last:
            self._block = self._reserve(BLOCK_SIZE)
            self._next = self._block.first
        producer_id = self._next
        self._next += 1
        return producer_id
