"""What a handler gets besides its request: the services, the request header, the caller,
and a produce request's turn among its connection's produce requests."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.base.caller import Caller
from protocol.headers import RequestHeader

if TYPE_CHECKING:
    from broker.api.services import Services
    from broker.security.sasl import Authentication


class AppendTurn:
    """A produce request's place among the produce requests of its connection. Kafka reads
    a connection's next request only after answering the last, so a producer's pipelined
    batches append in the order sent. Here requests run concurrently, and one whose
    transaction check waits (on the coordinator) must not be overtaken by a later one:
    `reached` waits until every earlier produce request of the connection has appended or
    ended; `done` lets the next one append."""

    __slots__ = ("_before", "finished")

    def __init__(self, before: AppendTurn | None) -> None:
        self._before = None if before is None or before.finished.done() else before.finished
        self.finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def reached(self) -> None:
        if self._before is not None and not self._before.done():
            await self._before
        self._before = None

    def done(self) -> None:
        if not self.finished.done():
            self.finished.set_result(None)


@dataclass(frozen=True, slots=True)
class RequestContext:
    services: Services
    header: RequestHeader
    caller: Caller
    turn: AppendTurn | None = None  # produce requests only
    auth: Authentication | None = None  # the connection's SASL state, on SASL listeners

    @property
    def version(self) -> int:
        return self.header.api_version

    def now_ms(self) -> int:
        return self.services.clock()
