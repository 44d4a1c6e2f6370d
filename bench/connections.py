"""Connections (`make bench`): one broker holding thousands of client connections.

On one Gregor broker and one Apache Kafka node, side by side in the same run, connections are
opened up to each size (1,000, then 10,000, on the same server). Each sends ApiVersions and
Metadata; then half of them stay idle and half long-poll Fetch (max_wait 500 ms on an empty
partition, asked again as soon as answered). While they are held:

- resident memory per connection: the broker's VmRSS (from /proc) above its value before the
  connections, divided by their number;
- a new client's Metadata: a fresh connection, ApiVersions, Metadata for the topic, p50 and p99.

The connections are raw sockets driven by asyncio protocols in a child process (no client
library, no task per connection): the same bytes for every request, answers only framed, so the
clients cost little beside the broker. The soft `ulimit -n` is raised to the hard limit, which
bounds the largest size.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import multiprocessing
import resource
import socket
import statistics
import struct
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path

from bench import reference
from bench.reference import Comparison, Server
from tests.differential.messages import build
from tests.integration.wire import WireClient, encode_body, frame, request_header

BENCHMARK = "connections"
TOPIC = "conns"
API_VERSIONS, METADATA, FETCH = 18, 3, 1
SAMPLES = 50
FETCH_WAIT_MS = 500
CONNECT_BATCH = 200  # connections being opened at once


def _request(api_key: int, version: int, tree: dict[str, object]) -> bytes:
    body = encode_body(build(api_key, version, tree), version)
    return frame(request_header(api_key, version, 1, "bench-conns") + body)


def _requests() -> tuple[bytes, bytes]:
    """The greeting (ApiVersions v3 then Metadata v12 for the topic) and the long-poll Fetch v11."""
    greeting = _request(API_VERSIONS, 3, {"client_software_name": "bench", "client_software_version": "1"})
    greeting += _request(METADATA, 12, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False})
    fetch = _request(FETCH, 11, {
        "replica_id": -1, "max_wait_ms": FETCH_WAIT_MS, "min_bytes": 1, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": TOPIC, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                    "fetch_offset": 0, "log_start_offset": -1,
                                                    "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": [], "rack_id": "",
    })
    return greeting, fetch


class Held(asyncio.Protocol):
    """One held connection: greets, then idles or long-polls Fetch, counting answers."""

    answers = 0  # every answer of every connection (the holder's progress)

    def __init__(self, greeting: bytes, fetch: bytes | None, greeted: asyncio.Future[None]) -> None:
        self.greeting, self.fetch, self.greeted = greeting, fetch, greeted
        self.buffer = bytearray()
        self.expected = 2  # the greeting's answers
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(self.greeting)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while len(self.buffer) >= 4:
            (size,) = struct.unpack_from(">i", self.buffer)
            if len(self.buffer) < 4 + size:
                return
            del self.buffer[:4 + size]
            Held.answers += 1
            self._answered()

    def _answered(self) -> None:
        if self.expected > 0:
            self.expected -= 1
            if self.expected == 0 and not self.greeted.done():
                self.greeted.set_result(None)
            return
        self.poll()  # the next long poll

    def poll(self) -> None:
        if self.fetch is not None and self.transport is not None and not self.transport.is_closing():
            self.transport.write(self.fetch)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.greeted.done():
            self.greeted.set_exception(ConnectionError(f"closed before its greeting was answered: {exc}"))


async def _open(port: int, count: int, held: list[Held]) -> None:
    """`count` more connections, half of them to fetch, CONNECT_BATCH at a time; their long
    polls start once all are open (so that opening them is timed alone)."""
    loop = asyncio.get_running_loop()
    greeting, fetch = _requests()
    for start in range(0, count, CONNECT_BATCH):
        greeted = []
        for _ in range(start, min(count, start + CONNECT_BATCH)):
            future: asyncio.Future[None] = loop.create_future()
            fetching = fetch if len(held) % 2 else None
            _, protocol = await loop.create_connection(
                functools.partial(Held, greeting, fetching, future), "127.0.0.1", port)
            held.append(protocol)
            greeted.append(future)
        await asyncio.wait_for(asyncio.gather(*greeted), 120)


async def _hold(port: int, pipe: Connection) -> None:
    """Open connections up to each size the parent asks for; report; close all at the end."""
    held: list[Held] = []
    loop = asyncio.get_running_loop()
    while (size := await loop.run_in_executor(None, pipe.recv)) > 0:
        started = time.monotonic()
        new = len(held)
        await _open(port, size - len(held), held)
        seconds = time.monotonic() - started
        for connection in held[new:]:
            connection.poll()
        pipe.send((len(held), seconds, Held.answers))
    for connection in held:
        if connection.transport is not None:
            connection.transport.close()
    pipe.send((0, 0.0, Held.answers))


def _holder(port: int, pipe: Connection) -> None:
    _raise_fd_limit()
    asyncio.run(_hold(port, pipe))


def rss_kib(pid: int) -> int:
    """VmRSS of a process, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def _new_client_ms(port: int) -> float:
    """A new client's first Metadata: connect, ApiVersions, Metadata for the topic, in ms."""
    started = time.perf_counter()
    with WireClient(port, timeout=30) as c:
        c.api_versions()
        answer = c.call(build(METADATA, 12, {"topics": [{"name": TOPIC}]}), 12)
    elapsed = (time.perf_counter() - started) * 1000
    assert answer.topics[0].error_code == 0, answer
    return elapsed


def _latencies(port: int) -> tuple[float, float]:
    times = []
    for _ in range(SAMPLES):
        times.append(_new_client_ms(port))
        time.sleep(0.02)
    cuts = statistics.quantiles(times, n=100)
    return cuts[49], cuts[98]


def measure(comparison: Comparison, server: Server, sizes: list[int]) -> None:
    port = int(server.bootstrap.rsplit(":", 1)[1])
    server.create_topic(TOPIC, 1, 1)
    _latencies(port)  # warm-up
    base = rss_kib(server.pid())
    parent, child = multiprocessing.Pipe()
    holder = multiprocessing.get_context("fork").Process(target=_holder, args=(port, child), daemon=True)
    holder.start()
    try:
        for size in sizes:
            _measure_size(comparison, server, port, base, parent, size)
        parent.send(0)
        parent.recv()
    finally:
        holder.join(30)
        if holder.is_alive():
            holder.kill()


def _measure_size(comparison: Comparison, server: Server, port: int, base: int, parent: Connection,
                  size: int) -> None:
    side = server.side
    opened, seconds, _ = _ask(parent, size)
    time.sleep(2 * FETCH_WAIT_MS / 1000)  # a few long polls each
    _, _, answers = _ask(parent, size)  # a size already reached opens nothing
    started = time.monotonic()
    p50, p99 = _latencies(port)
    _, _, answers_after = _ask(parent, size)
    polls = (answers_after - answers) / (time.monotonic() - started)
    rss = rss_kib(server.pid())
    row = f"{opened:,} connections"
    comparison.record(side, f"{row}: open (ApiVersions + Metadata each)", seconds, "s", higher=False)
    comparison.record(side, f"{row}: resident memory per connection", (rss - base) / opened, "KiB",
                      f"RSS {rss / 1024:,.0f} MiB, {base / 1024:,.0f} before", higher=False)
    comparison.record(side, f"{row}: new client's Metadata p50", p50, "ms", f"p99 {p99:.1f} ms",
                      higher=False)
    comparison.record(side, f"{row}: new client's Metadata p99", p99, "ms", higher=False)
    comparison.record(side, f"{row}: long polls answered", polls, "/s",
                      f"{opened // 2:,} fetching, {FETCH_WAIT_MS} ms each at most")


def _ask(parent: Connection, size: int) -> tuple[int, float, int]:
    """Have the holder reach `size` connections: how many it holds, the seconds it took to open
    them, and the answers its connections have read so far."""
    parent.send(size)
    answer: tuple[int, float, int] = parent.recv()
    return answer


def _raise_fd_limit() -> int:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def _sizes(wanted: list[int]) -> list[int]:
    """The sizes the hard file-descriptor limit allows (each side holds one socket per connection)."""
    hard = _raise_fd_limit()
    allowed = [s for s in sorted(wanted) if s + 1000 < hard]
    for s in sorted(set(wanted) - set(allowed)):
        print(f"{s:,} connections left out: ulimit -n is {hard}")
    return allowed


def main() -> None:
    parser = reference.arguments(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]))
    parser.add_argument("--connections", type=int, nargs="+", default=[1000, 10000],
                        help="sizes to measure, on the same server in turn")
    args = parser.parse_args()
    sizes = _sizes(args.connections)
    socket.setdefaulttimeout(60)
    comparison = Comparison(BENCHMARK)
    for n, start in enumerate(reference.SINGLE):
        with tempfile.TemporaryDirectory(prefix="gregor-bench-connections-") as tmp:
            with start(Path(tmp) / f"server-{n}", {}) as server:
                measure(comparison, server, sizes)
    comparison.finish(args.update_baseline)


if __name__ == "__main__":
    main()
