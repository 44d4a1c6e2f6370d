"""One listener's accept loop, Kafka's Acceptor: accept a socket, wait while the connection
quotas say so (`quotas.py`), close it at once when its address is at its limit, else serve it in
a task of its own. While the acceptor waits nothing more is accepted on its listener: new
connections wait in the kernel's backlog, as on Kafka. Nothing here runs per request.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from collections.abc import Awaitable, Callable

from broker import metrics
from broker.base.clock import now_ms
from broker.front.quotas import ConnectionLimits, ConnectionQuotas

log = logging.getLogger(__name__)
READ_LIMIT = 2**16  # the StreamReader's buffer before it stops reading the socket

Serve = Callable[[str, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Slots:
    """The connection quotas and a wake-up for the acceptors waiting for a connection to close."""

    def __init__(self, quotas: ConnectionQuotas) -> None:
        self.quotas = quotas
        self._freed: asyncio.Future[None] | None = None

    async def wait(self, listener: str) -> None:
        """Until `listener` has a slot (`max.connections`)."""
        while not self.quotas.slot_available(listener):
            if self._freed is None:
                self._freed = asyncio.get_running_loop().create_future()
            await self._freed

    def close(self, listener: str, ip: str) -> None:
        self.quotas.close(listener, ip)
        self._wake()

    def update(self, limits: ConnectionLimits) -> None:
        """New limits: a waiting acceptor looks again (a higher `max.connections` frees it)."""
        self.quotas.update(limits)
        self._wake()

    def _wake(self) -> None:
        if self._freed is not None:
            self._freed.set_result(None)
            self._freed = None


class Acceptor:
    def __init__(self, listener: str, sock: socket.socket, slots: Slots,
                 tls: ssl.SSLContext | None, serve: Serve) -> None:
        self.listener = listener
        self.sock = sock
        self.slots = slots
        self.tls = tls
        self.serve = serve
        self.tasks: set[asyncio.Task[None]] = set()  # the connections being served
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.sock.setblocking(False)
        self.task = asyncio.create_task(self._accept_loop(), name=f"acceptor {self.listener}")

    def close(self) -> None:
        """Stop accepting (the connections already served are the broker's to end)."""
        if self.task is not None:
            self.task.cancel()
        self.sock.close()

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, peer = await loop.sock_accept(self.sock)
            except OSError as exc:  # EMFILE, ECONNABORTED: Kafka logs and goes on accepting
                log.warning("accepting a connection on %s failed: %s", self.listener, exc)
                await asyncio.sleep(0.1)
                continue
            await self._admit(conn, str(peer[0]))

    async def _admit(self, conn: socket.socket, ip: str) -> None:
        """ConnectionQuotas.inc: the creation rate and a free slot first, then the address's limit."""
        throttle = self.slots.quotas.throttle_ms(self.listener, now_ms())
        if throttle:
            metrics.accept_throttled(self.listener, throttle)
            await asyncio.sleep(throttle / 1000)
        if not self.slots.quotas.slot_available(self.listener):
            started = time.monotonic()
            await self.slots.wait(self.listener)
            metrics.accept_blocked(self.listener, time.monotonic() - started)
        refused = self.slots.quotas.open(self.listener, ip)
        if refused is not None:
            log.info("Rejected connection from %s, address already has the configured maximum of %d "
                     "connections.", ip, refused)
            metrics.connection_refused(self.listener)
            conn.close()
            return
        task = asyncio.create_task(self._connection(conn, ip))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _connection(self, conn: socket.socket, ip: str) -> None:
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            reader, writer = await self._streams(conn)
        except (OSError, ssl.SSLError) as exc:  # the peer left, or its TLS handshake failed
            log.info("connection from %s on %s failed before serving: %s", ip, self.listener, exc)
            conn.close()
            self.slots.close(self.listener, ip)
            return
        try:
            await self.serve(self.listener, reader, writer)
        finally:
            self.slots.close(self.listener, ip)

    async def _streams(self, conn: socket.socket) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """The accepted socket as asyncio streams (what `asyncio.start_server` hands its callback)."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=READ_LIMIT, loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        transport, _ = await loop.connect_accepted_socket(lambda: protocol, conn, ssl=self.tls)
        return reader, asyncio.StreamWriter(transport, protocol, reader, loop)
