"""Requests waiting for a transactional id to settle, instead of bouncing the client.

While an id's record is being written, or its transaction completes (Prepare* until
Complete*), the pure machine answers CONCURRENT_TRANSACTIONS and Kafka's clients back off
20-100 ms before trying again. The coordinator parks such a request here instead and asks
the machine again as soon as the id's next record is replayed (or the write failed, or the
partition was unloaded, which the machine then answers NOT_COORDINATOR). Waiters of one id
wake in arrival order, each bounded by its own deadline.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable


class Parking:
    def __init__(self) -> None:
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}

    async def wait(self, key: str, deadline: float) -> bool:
        """Wait until `key` is woken: True, or False once the loop's clock passes `deadline`."""
        loop = asyncio.get_running_loop()
        remaining = deadline - loop.time()
        if remaining <= 0:
            return False
        future: asyncio.Future[None] = loop.create_future()
        queue = self._waiting.setdefault(key, deque())
        queue.append(future)
        try:
            await asyncio.wait_for(future, remaining)
            return True
        except TimeoutError:
            return False
        finally:
            self._forget(key, future)

    def wake(self, key: str) -> None:
        """Every waiter of `key`, in arrival order (they resume in that order)."""
        for future in self._waiting.pop(key, ()):
            if not future.done():
                future.set_result(None)

    def wake_all(self, keys: Iterable[str]) -> None:
        for key in list(keys):
            self.wake(key)

    def keys(self) -> list[str]:
        return list(self._waiting)

    def _forget(self, key: str, future: asyncio.Future[None]) -> None:
        queue = self._waiting.get(key)
        if queue is None:
            return
        try:
            queue.remove(future)
        except ValueError:
            return
        if not queue:
            del self._waiting[key]
