"""Producer-id blocks from etcd, reserved ahead so InitProducerId never waits on etcd.

`ProducerIdManager` asks for a block synchronously when its block runs out; in
cluster mode the answer comes from a queue of blocks reserved in etcd (by
compare-and-swap) ahead of time, refilled in the background as it drains.
"""

from __future__ import annotations

import asyncio
import collections
import logging

import aetcd.exceptions

from broker.base.faults import slow_point
from broker.store.etcd_store import EtcdMetadataStore
from coordinator.producer_ids import BLOCK_SIZE, ProducerIdBlock, ProducerIdsUnavailable

log = logging.getLogger(__name__)

AHEAD = 2  # blocks kept in reserve
RETRY_S = 1.0


class PrefetchedProducerIdBlocks:
    def __init__(self, store: EtcdMetadataStore) -> None:
        self.store = store
        self._ready: collections.deque[ProducerIdBlock] = collections.deque()
        self._refill: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Blocks reserved before serving; etcd out of reach now (a broker restarted while cut
        off) leaves the reservation to the background, not the start-up."""
        await slow_point("producer-ids-start")
        try:
            await self._fill()
        except (aetcd.exceptions.ClientError, OSError) as exc:
            log.warning("reserving producer ids in etcd failed (%s); retrying while serving",
                        type(exc).__name__)
            self._start_refill()

    def reserve(self, size: int) -> ProducerIdBlock:
        """The next reserved block (its size is the store's BLOCK_SIZE); refills behind it.
        ProducerIdsUnavailable when none is ready (etcd out of reach while more than AHEAD
        blocks' worth of ids went out)."""
        if size != BLOCK_SIZE:
            raise ValueError(f"blocks are reserved ahead with {BLOCK_SIZE} ids, not {size}")
        if not self._ready:
            self._start_refill()
            raise ProducerIdsUnavailable("no producer-id block reserved yet")
        block = self._ready.popleft()
        self._start_refill()
        return block

    def _start_refill(self) -> None:
        if self._refill is None or self._refill.done():
            self._refill = asyncio.create_task(self._fill_retrying())

    async def _fill(self) -> None:
        while len(self._ready) < AHEAD:
            self._ready.append(await self.store.reserve_producer_ids(BLOCK_SIZE))

    async def _fill_retrying(self) -> None:
        while True:
            try:
                await self._fill()
                return
            except (aetcd.exceptions.ClientError, OSError) as exc:
                log.warning("reserving producer ids in etcd failed (%s); retrying", type(exc).__name__)
                await asyncio.sleep(RETRY_S)

    async def stop(self) -> None:
        if self._refill is not None:
            self._refill.cancel()
            await asyncio.gather(self._refill, return_exceptions=True)
