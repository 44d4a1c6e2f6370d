"""One task per connection: read a frame, decode, dispatch, answer in order.

Requests may be pipelined: each is handled in its own task, and a writer task
sends the responses in request order. Unreadable frames close the connection
with a log line; a request that decodes but is wrong gets its protocol error.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from broker import request_log
from broker.context import RequestContext
from broker.handlers import api_versions
from broker.handlers.registry import ApiHandler
from protocol.framing import SIZE_PREFIX, FrameSizeError, frame_parts, frame_size
from protocol.headers import (
    API_VERSIONS_KEY,
    HeaderDecodeError,
    RequestHeader,
    decode_request_header,
    encode_response_header,
    header_is_flexible,
    peek_header,
)
from protocol.messages import RequestDecodeError, decode_request

if TYPE_CHECKING:
    from broker.server import Broker

log = logging.getLogger(__name__)
MAX_IN_FLIGHT = 100


class CloseConnection(Exception):
    """The peer sent something we cannot answer; the reason is logged."""


class Connection:
    def __init__(
        self, broker: Broker, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.broker = broker
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername") or ("?", 0)
        self.peer = f"{peer[0]}:{peer[1]}"
        self.host = str(peer[0])
        self.responses: asyncio.Queue[asyncio.Task[list[Any]] | None] = asyncio.Queue(
            MAX_IN_FLIGHT
        )
        self.debug = request_log.enabled()  # once: nothing per request when DEBUG is off
        self.requests = 0

    async def run(self) -> None:
        sender = asyncio.create_task(self._send_loop())
        try:
            await self._read_loop()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except CloseConnection as exc:
            log.warning("closing connection from %s: %s", self.peer, exc)
        finally:
            await self.responses.put(None)
            await self._finish(sender)

    async def _finish(self, sender: asyncio.Task[None]) -> None:
        try:
            await sender
        except (ConnectionError, asyncio.CancelledError):
            pass
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass

    async def _read_loop(self) -> None:
        max_size = self.broker.config["socket.request.max.bytes"]
        while True:
            prefix = await self.reader.readexactly(SIZE_PREFIX)
            try:
                size = frame_size(prefix, max_size)
            except FrameSizeError as exc:
                raise CloseConnection(str(exc)) from None
            payload = await self.reader.readexactly(size)
            task = self._dispatch(payload)
            if task is not None:
                await self.responses.put(task)

    def _dispatch(self, payload: bytes) -> asyncio.Task[list[Any]] | None:
        header, handler = self._parse_header(payload)
        if handler is None:
            return asyncio.create_task(self._unsupported_api_versions(header))
        body = memoryview(payload)[header.size :]
        try:
            request = decode_request(handler.api_key, header.api_version, body)
        except RequestDecodeError as exc:
            raise CloseConnection(
                f"cannot decode {handler.request.__name__} v{header.api_version} "
                f"(client {header.client_id!r}): {exc}; frame starts {bytes(payload[:48]).hex()}"
            ) from None
        ctx = RequestContext(self.broker, header, self.host)
        if handler.api_key == 0 and request.acks == 0:
            if self.debug:
                self._log_request(header, handler, time.monotonic(), None)
            fire: asyncio.Task[Any] = asyncio.create_task(handler.handle(ctx, request))
            fire.add_done_callback(_log_failure)
            return None
        return asyncio.create_task(self._respond(ctx, handler, request))

    def _parse_header(self, payload: bytes) -> tuple[RequestHeader, ApiHandler | None]:
        try:
            api_key, api_version, _ = peek_header(payload)
            handler = self.broker.handlers.get(api_key)
            if handler is None or not handler.supports(api_version):
                if api_key == API_VERSIONS_KEY:
                    return decode_request_header(payload, False), None
                raise CloseConnection(
                    f"unsupported API key {api_key} version {api_version}"
                    + ("" if handler else " (unknown API)")
                )
            flexible = header_is_flexible(api_key, api_version)
            return decode_request_header(payload, flexible), handler
        except HeaderDecodeError as exc:
            raise CloseConnection(f"bad request header: {exc}") from None

    async def _respond(self, ctx: RequestContext, handler: ApiHandler, request: Any) -> list[Any]:
        header = ctx.header
        started = time.monotonic() if self.debug else 0.0
        response = await handler.handle(ctx, request)
        if self.debug:
            self._log_request(header, handler, started, response)
        body = response.encode(version=header.api_version)
        head = encode_response_header(header.api_key, header.api_version, header.correlation_id)
        return frame_parts(head, body)

    def _log_request(self, header: RequestHeader, handler: ApiHandler, started: float, response: Any) -> None:
        self.requests += 1
        request_log.answered(self.peer, header, request_log.api_name(handler.request), started, response)

    async def _unsupported_api_versions(self, header: RequestHeader) -> list[Any]:
        body = api_versions.unsupported_version_response(self.broker)
        head = encode_response_header(header.api_key, 0, header.correlation_id)
        return frame_parts(head, body)

    async def _send_loop(self) -> None:
        while True:
            task = await self.responses.get()
            if task is None:
                return
            try:
                parts = await task
            except Exception:
                log.exception("handler failed on connection %s; closing it", self.peer)
                self.writer.close()
                return
            self.writer.writelines(parts)
            await self.writer.drain()


def _log_failure(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("acks=0 produce failed", exc_info=task.exception())
