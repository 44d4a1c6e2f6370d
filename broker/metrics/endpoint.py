"""The Prometheus endpoint: `GET /metrics` on `metrics.listener`, served on the broker's
event loop, so the collectors read partitions and coordinators without racing the
code that changes them (prometheus-client's own HTTP server runs in a thread).

One request per connection (`Connection: close`), as a scraper sends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger(__name__)
READ_TIMEOUT_S = 10.0
MAX_HEADER_LINES = 100
PATHS = ("/metrics", "/")


class MetricsEndpoint:
    def __init__(self, sock: socket.socket, registry: CollectorRegistry) -> None:
        self._socket = sock
        self._registry = registry
        self._server: asyncio.base_events.Server | None = None

    @property
    def port(self) -> int:
        return int(self._socket.getsockname()[1])

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, sock=self._socket)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(_read_request(reader), READ_TIMEOUT_S)
            writer.write(self._answer(request))
            await writer.drain()
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass  # a scraper that went away or sent nonsense: nothing to report
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    def _answer(self, request: tuple[str, str] | None) -> bytes:
        if request is None:
            return _response(400, "Bad Request", b"bad request\n")
        method, path = request
        if method not in ("GET", "HEAD"):
            return _response(405, "Method Not Allowed", b"only GET\n")
        if path.split("?", 1)[0] not in PATHS:
            return _response(404, "Not Found", b"metrics are at /metrics\n")
        body = generate_latest(self._registry)
        return _response(200, "OK", b"" if method == "HEAD" else body, CONTENT_TYPE_LATEST, len(body))


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str] | None:
    """(method, path) of the request line, after reading its headers; None if malformed."""
    line = await reader.readline()
    for _ in range(MAX_HEADER_LINES):
        header = await reader.readline()
        if header in (b"\r\n", b"\n", b""):
            break
    parts = line.decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return None
    return parts[0], parts[1]


def _response(
    code: int, reason: str, body: bytes, content_type: str = "text/plain; charset=utf-8",
    length: int | None = None,
) -> bytes:
    head = (
        f"HTTP/1.1 {code} {reason}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body) if length is None else length}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body
