"""What a handler gets besides its request."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from protocol.headers import RequestHeader

if TYPE_CHECKING:
    from broker.server import Broker


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class RequestContext:
    broker: Broker
    header: RequestHeader
    client_host: str

    @property
    def version(self) -> int:
        return self.header.api_version

    def now_ms(self) -> int:
        return now_ms()
