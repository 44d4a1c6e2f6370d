"""An inter-broker client: one connection, pipelined requests, responses by correlation id.

`BrokerClient.call(message, version)` sends at once and waits for its own
answer while other calls are in flight on the same connection (Kafka answers
in order; the correlation id checks it). The connection opens on first use
and again after a failure; a failure fails every call in flight with the
cause, so callers (replica fetchers, the marker channel) decide what to retry.
A SASL session with a lifetime (`connections.max.reauth.ms` on the other
broker) is renewed before it ends by a fresh connection; the old one finishes
the calls in flight on it and closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import struct
import time

from broker.security.client import ClientSecurity
from protocol.client_codec import decode_response, encode_request, peek_correlation_id
from protocol.framing import frame
from protocol.messages import Request, Response

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
MAX_RESPONSE_BYTES = 1 << 30
# A connection takes new calls until this share of its SASL session's lifetime has passed, then
# a new connection (authenticated afresh) takes them, so none reaches the other broker after
# the session expired (KIP-368; Kafka's client re-authenticates at 85-95% of the lifetime).
RENEW_AT = 0.85


class BrokerUnreachable(ConnectionError):
    """The connection failed or closed before the answer came."""


class _Link:
    """One connection: the calls in flight on it, and when it must stop taking new ones (its
    SASL session's lifetime, KIP-368)."""

    def __init__(self, writer: asyncio.StreamWriter, renew_at: float | None) -> None:
        self.writer = writer
        self.renew_at = renew_at  # monotonic; None: never
        self.pending: dict[int, tuple[int, int, asyncio.Future[Response]]] = {}
        self.retired = False  # a newer link takes the new calls; this one closes once idle
        self.reader_task: asyncio.Task[None] | None = None

    def usable(self, now: float) -> bool:
        fresh = self.renew_at is None or now < self.renew_at
        return fresh and not self.retired and not self.writer.is_closing()

    def retire(self) -> None:
        self.retired = True
        self._close_if_done()

    def deliver(self, payload: bytes) -> None:
        entry = self.pending.pop(peek_correlation_id(payload), None)
        if entry is not None:  # else its caller gave up (timeout or cancel)
            api_key, version, future = entry
            if not future.done():
                future.set_result(decode_response(api_key, version, payload))
        self._close_if_done()

    def forget(self, correlation_id: int) -> None:
        """The call ended (answered, timed out or cancelled)."""
        self.pending.pop(correlation_id, None)
        self._close_if_done()

    def _close_if_done(self) -> None:
        if self.retired and not self.pending:
            self.writer.close()

    def fail_all(self, cause: Exception) -> None:
        self.writer.close()
        for _, _, future in self.pending.values():
            if not future.done():
                future.set_exception(cause)
        self.pending.clear()


class BrokerClient:
    def __init__(
        self, host: str, port: int, client_id: str, connect_timeout_s: float = 5.0,
        security: ClientSecurity | None = None,
    ) -> None:
        self.host, self.port = host, port
        self.client_id = client_id
        self.security = security  # the inter-broker listener's TLS and SASL; None: PLAINTEXT
        self._connect_timeout = connect_timeout_s
        self._link: _Link | None = None
        self._retired: set[_Link] = set()  # links finishing their calls before they close
        self._ids = itertools.count(1)
        self._connecting = asyncio.Lock()

    async def call(
        self, message: Request, version: int, timeout_s: float | None = None, client_id: str | None = None
    ) -> Response:
        """Send one request and return its decoded response (`client_id` replaces this
        client's own for this request)."""
        link = await self._connection()
        correlation_id = next(self._ids) & 0x7FFFFFFF
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        link.pending[correlation_id] = (message.API_KEY, version, future)
        request = encode_request(message, version, correlation_id, client_id or self.client_id)
        link.writer.write(frame(request))
        try:
            return await asyncio.wait_for(future, timeout_s)
        finally:
            link.forget(correlation_id)

    async def _connection(self) -> _Link:
        async with self._connecting:
            link = self._link
            if link is None or not link.usable(time.monotonic()):
                if link is not None and not link.writer.is_closing():
                    self._retire(link)  # its session ends soon: a new one for the next calls
                link = self._link = await self._open()
            return link

    def _retire(self, link: _Link) -> None:
        link.retire()
        if link.reader_task is not None and not link.reader_task.done():
            self._retired.add(link)
            link.reader_task.add_done_callback(lambda _: self._retired.discard(link))

    async def _open(self) -> _Link:
        try:
            reader, writer, renew_at = await asyncio.wait_for(self._connect(), self._connect_timeout)
        except (TimeoutError, OSError) as exc:  # AuthenticationError is a ConnectionError
            raise BrokerUnreachable(f"{self.host}:{self.port}: {exc or type(exc).__name__}") from None
        link = _Link(writer, renew_at)
        link.reader_task = asyncio.create_task(self._read_responses(reader, link))
        return link

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, float | None]:
        """The connection and when to stop sending on it (None: never). The other broker's
        session clock starts when it has the last SASL token, so this one, started before the
        first, ends earlier."""
        security = self.security
        if security is None:
            return *(await asyncio.open_connection(self.host, self.port)), None
        reader, writer = await asyncio.open_connection(
            self.host, self.port, ssl=security.tls, server_hostname=self.host if security.tls else None
        )
        started = time.monotonic()
        try:
            lifetime_ms = await security.authenticate(reader, writer, self.client_id)
        except BaseException:
            writer.close()
            raise
        return reader, writer, started + lifetime_ms / 1000 * RENEW_AT if lifetime_ms > 0 else None

    async def _read_responses(self, reader: asyncio.StreamReader, link: _Link) -> None:
        cause: Exception = BrokerUnreachable(f"{self.host}:{self.port} closed the connection")
        try:
            while True:
                (size,) = _SIZE.unpack(await reader.readexactly(4))
                if not 0 <= size <= MAX_RESPONSE_BYTES:
                    raise BrokerUnreachable(f"{self.host}:{self.port} sent a frame of {size} bytes")
                link.deliver(await reader.readexactly(size))
        except (asyncio.IncompleteReadError, OSError):
            pass
        except Exception as exc:  # a malformed response: this connection cannot be trusted
            cause = BrokerUnreachable(f"{self.host}:{self.port}: {exc}")
        link.fail_all(cause)
        if self._link is link:
            self._link = None

    async def close(self) -> None:
        links = [*self._retired, *([self._link] if self._link is not None else [])]
        self._link, self._retired = None, set()
        for link in links:
            task, link.reader_task = link.reader_task, None
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            link.fail_all(BrokerUnreachable("client closed"))


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
