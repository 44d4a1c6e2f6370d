"""An inter-broker client: one connection, pipelined requests, responses by correlation id.

`BrokerClient.call(message, version)` sends at once and waits for its own
answer while other calls are in flight on the same connection (Kafka answers
in order; the correlation id checks it). The connection opens on first use
and again after a failure; a failure fails every call in flight with the
cause, so callers (replica fetchers, the marker channel) decide what to retry.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import struct
from typing import Any

from broker.security.client import ClientSecurity
from protocol.client_codec import decode_response, encode_request, peek_correlation_id
from protocol.framing import frame

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
MAX_RESPONSE_BYTES = 1 << 30


class BrokerUnreachable(ConnectionError):
    """The connection failed or closed before the answer came."""


class BrokerClient:
    def __init__(
        self, host: str, port: int, client_id: str, connect_timeout_s: float = 5.0,
        security: ClientSecurity | None = None,
    ) -> None:
        self.host, self.port = host, port
        self.client_id = client_id
        self.security = security  # the inter-broker listener's TLS and SASL; None: PLAINTEXT
        self._connect_timeout = connect_timeout_s
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._pending: dict[int, tuple[int, int, asyncio.Future[Any]]] = {}
        self._ids = itertools.count(1)
        self._connecting = asyncio.Lock()

    async def call(
        self, message: Any, version: int, timeout_s: float | None = None, client_id: str | None = None
    ) -> Any:
        """Send one request and return its decoded response (`client_id` replaces this
        client's own for this request)."""
        writer = await self._connection()
        correlation_id = next(self._ids) & 0x7FFFFFFF
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = (message.API_KEY, version, future)
        writer.write(frame(encode_request(message, version, correlation_id, client_id or self.client_id)))
        try:
            return await asyncio.wait_for(future, timeout_s)
        finally:
            self._pending.pop(correlation_id, None)

    async def _connection(self) -> asyncio.StreamWriter:
        async with self._connecting:
            if self._writer is None or self._writer.is_closing():
                await self._open()
            assert self._writer is not None
            return self._writer

    async def _open(self) -> None:
        try:
            reader, writer = await asyncio.wait_for(self._connect(), self._connect_timeout)
        except (TimeoutError, OSError) as exc:  # AuthenticationError is a ConnectionError
            raise BrokerUnreachable(f"{self.host}:{self.port}: {exc or type(exc).__name__}") from None
        self._writer = writer
        self._reader_task = asyncio.create_task(self._read_responses(reader))

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        security = self.security
        if security is None:
            return await asyncio.open_connection(self.host, self.port)
        reader, writer = await asyncio.open_connection(
            self.host, self.port, ssl=security.tls, server_hostname=self.host if security.tls else None
        )
        try:
            await security.authenticate(reader, writer, self.client_id)
        except BaseException:
            writer.close()
            raise
        return reader, writer

    async def _read_responses(self, reader: asyncio.StreamReader) -> None:
        cause: Exception = BrokerUnreachable(f"{self.host}:{self.port} closed the connection")
        try:
            while True:
                (size,) = _SIZE.unpack(await reader.readexactly(4))
                if not 0 <= size <= MAX_RESPONSE_BYTES:
                    raise BrokerUnreachable(f"{self.host}:{self.port} sent a frame of {size} bytes")
                self._deliver(await reader.readexactly(size))
        except (asyncio.IncompleteReadError, OSError):
            pass
        except Exception as exc:  # a malformed response: this connection cannot be trusted
            cause = BrokerUnreachable(f"{self.host}:{self.port}: {exc}")
        self._fail_all(cause)

    def _deliver(self, payload: bytes) -> None:
        entry = self._pending.get(peek_correlation_id(payload))
        if entry is None:
            return  # its caller gave up (timeout or cancel)
        api_key, version, future = entry
        if not future.done():
            future.set_result(decode_response(api_key, version, payload))

    def _fail_all(self, cause: Exception) -> None:
        if self._writer is not None:
            self._writer.close()
        self._writer = None
        for _, _, future in self._pending.values():
            if not future.done():
                future.set_exception(cause)
        self._pending.clear()

    async def close(self) -> None:
        task, self._reader_task = self._reader_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._fail_all(BrokerUnreachable("client closed"))


class BrokerClientPool:
    """One client per broker address, made on first use, all closed together."""

    def __init__(self, client_id: str, security: ClientSecurity | None = None) -> None:
        self.client_id = client_id
        self.security = security
        self._clients: dict[tuple[str, int], BrokerClient] = {}

    def get(self, host: str, port: int) -> BrokerClient:
        client = self._clients.get((host, port))
        if client is None:
            client = self._clients[(host, port)] = BrokerClient(
                host, port, self.client_id, security=self.security
            )
        return client

    async def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        await asyncio.gather(*(c.close() for c in clients))
