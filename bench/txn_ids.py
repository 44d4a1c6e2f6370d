"""Transactional ids at scale (`make bench`): one broker's transaction coordinator holding many ids.

At each size (1,000 and 10,000 transactional ids; `--ids 1000 10000 100000` adds 100,000, about
twelve minutes more on a 2-core machine, most of it creating the ids on both brokers), on a fresh
Gregor broker and a fresh Apache Kafka node of the same config (`__transaction_state` of 50
partitions, RF 1), side by side in the same run:

- create: a load generator that speaks the protocol itself (raw sockets, CONNECTIONS connections
  pipelining WINDOW requests each; a client per id would be the bottleneck) asks FindCoordinator
  for every id (batched, v4), then InitProducerId for every id (ids/s), then one small
  transaction per id (AddPartitionsToTxn v3, a one-record transactional Produce, EndTxn commit;
  CHUNK ids at a time; transactions/s, until ListTransactions shows every id in CompleteCommit);
- resident memory per id: the broker's VmRSS after the ids less before, divided by the ids;
- ListTransactions of every id: one request's latency (p50 of SAMPLES), and the wall time of
  `gregor transactions list` and of Kafka's `kafka-transactions.sh list` (its main class,
  TransactionsCommand), each tool against each broker;
- DescribeTransactions of a batch of DESCRIBE_BATCH ids in one request (p50);
- coordinator load: the broker killed (kill -9) and started; the time from its start until an
  InitProducerId of an existing id, and of a new id (in another `__transaction_state`
  partition), is answered with no COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR.

Then, Gregor only and in process (there is no Kafka beside it): a partition's producer state
(storage/producer_state.py) of as many producer ids spread over PRODUCER_PARTITIONS partitions,
its `.snapshot` files written and loaded back (`take_snapshot`, `truncate_and_reload`).

Printed per size, so that a cost growing per id shows as a slope across the rows.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import shutil
import statistics
import struct
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from bench import reference
from bench.connections import rss_kib
from bench.reference import GREGOR, Comparison, GregorBroker, KafkaBroker, Server
from protocol.messages import RESPONSES, response_is_flexible
from protocol.types import Offset, ProducerEpoch, ProducerId
from storage.producer_state import BatchMetadata, ProducerStateEntry, ProducerStateManager
from tests.differential.messages import build
from tests.integration.harness import gregor_command
from tests.integration.kafka import KafkaNode, kafka_tool
from tests.integration.wire import WireClient, build_batch, encode_body, fix_crc, frame, request_header

BENCHMARK = "txn_ids"
TOPIC = "txn-ids"
TOPIC_PARTITIONS = 10
CONNECTIONS = 16
WINDOW = 64  # requests in flight on one connection
SAMPLES = 5
DESCRIBE_BATCH = 1000
PRODUCER_PARTITIONS = 10
TXN_TIMEOUT_MS = 900_000  # transaction.max.timeout.ms's default
CHUNK = 5000  # ids whose transactions run at once
CONFIG: dict[str, object] = {
    "transaction.state.log.num.partitions": 50,
    "transaction.state.log.replication.factor": 1,
    "offsets.topic.replication.factor": 1,
}
PRODUCE, FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS, END_TXN = 0, 10, 22, 24, 26
DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 65, 66
V = {PRODUCE: 9, FIND_COORDINATOR: 4, INIT_PRODUCER_ID: 4, ADD_PARTITIONS: 3, END_TXN: 3,
     DESCRIBE_TRANSACTIONS: 0, LIST_TRANSACTIONS: 0}
# Answers worth asking again: NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
# COORDINATOR_NOT_AVAILABLE, CONCURRENT_TRANSACTIONS, NOT_ENOUGH_REPLICAS, UNKNOWN_TOPIC_OR_PARTITION
RETRIABLE = {16, 14, 15, 51, 19, 3}
PRODUCER_ID_AT, EPOCH_AT = 43, 51  # in a record batch's header


def tid(n: int) -> str:
    return f"bench-txn-{n:07d}"


def _port(server: Server) -> int:
    return int(server.bootstrap.rsplit(":", 1)[1])


# -- the load generator: requests pipelined over a few raw connections -----------------------


class Pipelined(asyncio.Protocol):
    """One connection: frames out as given, answers (in request order) to their futures."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.waiting: collections.deque[asyncio.Future[bytes]] = collections.deque()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def send(self, data: bytes) -> asyncio.Future[bytes]:
        assert self.transport is not None
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.waiting.append(future)
        self.transport.write(data)
        return future

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        start = 0
        while len(self.buffer) - start >= 4:
            (size,) = struct.unpack_from(">i", self.buffer, start)
            if len(self.buffer) - start < 4 + size:
                break
            self.waiting.popleft().set_result(bytes(self.buffer[start + 4:start + 4 + size]))
            start += 4 + size
        del self.buffer[:start]

    def connection_lost(self, exc: Exception | None) -> None:
        while self.waiting:  # their lane fails on the first (cancelled)
            self.waiting.popleft().cancel()


def request(api_key: int, tree: dict[str, Any]) -> bytes:
    """A request frame (correlation id 0: answers are matched by their order)."""
    version = V[api_key]
    body = encode_body(build(api_key, version, tree), version)
    return frame(request_header(api_key, version, 0, "bench-txn-ids") + body)


def decode(api_key: int, payload: bytes) -> Any:
    pos = 4 + (1 if response_is_flexible(api_key, V[api_key]) else 0)
    return RESPONSES[api_key].decode(payload[pos:], version=V[api_key])


Step = Callable[[int], bytes]  # id number -> request frame
Check = Callable[[int, Any], int]  # id number, answer -> error code (0: done)


async def _lane(conn: Pipelined, api_key: int, items: list[int], step: Step, check: Check,
                retry: list[int]) -> None:
    in_flight: collections.deque[tuple[int, asyncio.Future[bytes]]] = collections.deque()

    async def settle() -> None:
        n, future = in_flight.popleft()
        error = check(n, decode(api_key, await future))
        if error in RETRIABLE:
            retry.append(n)
        elif error != 0:
            raise RuntimeError(f"api {api_key} for {tid(n)}: error {error}")

    for n in items:
        if len(in_flight) >= WINDOW:
            await settle()
        in_flight.append((n, conn.send(step(n))))
    while in_flight:
        await settle()


async def run_step(conns: list[Pipelined], api_key: int, items: Iterable[int], step: Step, check: Check,
                   timeout_s: float = 600) -> None:
    """`step` for every id, spread over the connections, until every answer is done (retriable
    ones are asked again)."""
    todo, deadline = list(items), time.monotonic() + timeout_s
    while todo:
        retry: list[int] = []
        await asyncio.gather(*(_lane(c, api_key, todo[i::len(conns)], step, check, retry)
                               for i, c in enumerate(conns)))
        if retry:
            if time.monotonic() > deadline:
                raise RuntimeError(f"api {api_key}: {len(retry)} ids still retriable after {timeout_s} s")
            await asyncio.sleep(0.05)
        todo = sorted(retry)


class Generator:
    """Ids 0..count-1 created on one broker: InitProducerId, then one transaction each."""

    def __init__(self, port: int, count: int) -> None:
        self.port, self.count = port, count
        self.producers: dict[int, tuple[int, int]] = {}
        self.batch = build_batch([b"v"], transactional=True, producer_id=1, producer_epoch=0, base_sequence=0)
        self.conns: list[Pipelined] = []

    async def connect(self) -> None:
        loop = asyncio.get_running_loop()
        for _ in range(CONNECTIONS):
            _, conn = await loop.create_connection(Pipelined, "127.0.0.1", self.port)
            self.conns.append(conn)

    def close(self) -> None:
        for c in self.conns:
            if c.transport is not None:
                c.transport.close()

    async def find_coordinators(self, node_id: int) -> None:
        def step(n: int) -> bytes:
            keys = [tid(m) for m in range(n, min(n + 1000, self.count))]
            return request(FIND_COORDINATOR, {"key_type": 1, "coordinator_keys": keys})

        def check(_n: int, answer: Any) -> int:
            for c in answer.coordinators:
                if c.error_code:
                    return int(c.error_code)
                assert c.node_id == node_id, f"{c.key} coordinated by {c.node_id}"
            return 0

        await run_step(self.conns[:1], FIND_COORDINATOR, range(0, self.count, 1000), step, check)

    async def init(self) -> None:
        def step(n: int) -> bytes:
            return request(INIT_PRODUCER_ID, {"transactional_id": tid(n), "producer_id": -1,
                                              "producer_epoch": -1, "transaction_timeout_ms": TXN_TIMEOUT_MS})

        def check(n: int, answer: Any) -> int:
            if answer.error_code == 0:
                self.producers[n] = (answer.producer_id, answer.producer_epoch)
            return int(answer.error_code)

        await run_step(self.conns, INIT_PRODUCER_ID, range(self.count), step, check)

    async def transact(self) -> None:
        """One transaction per id: AddPartitionsToTxn, Produce, EndTxn (commit)."""
        for start in range(0, self.count, CHUNK):
            ids = range(start, min(start + CHUNK, self.count))
            await run_step(self.conns, ADD_PARTITIONS, ids, self._add, _add_error)
            await run_step(self.conns, PRODUCE, ids, self._produce, _produce_error)
            await run_step(self.conns, END_TXN, ids, self._end, lambda _n, a: int(a.error_code))

    def _add(self, n: int) -> bytes:
        pid, epoch = self.producers[n]
        topics = [{"name": TOPIC, "partitions": [n % TOPIC_PARTITIONS]}]
        return request(ADD_PARTITIONS, {
            "v3_and_below_transactional_id": tid(n), "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": topics})

    def _produce(self, n: int) -> bytes:
        pid, epoch = self.producers[n]
        batch = bytearray(self.batch)
        struct.pack_into(">qh", batch, PRODUCER_ID_AT, pid, epoch)
        return request(PRODUCE, {"transactional_id": tid(n), "acks": -1, "timeout_ms": 30_000, "topic_data": [
            {"name": TOPIC, "partition_data": [{"index": n % TOPIC_PARTITIONS, "records": fix_crc(batch)}]}]})

    def _end(self, n: int) -> bytes:
        pid, epoch = self.producers[n]
        return request(END_TXN, {"transactional_id": tid(n), "producer_id": pid, "producer_epoch": epoch,
                                 "committed": True})


def _add_error(_n: int, answer: Any) -> int:
    return max((int(p.partition_error_code) for t in answer.results_by_topic_v3_and_below
                for p in t.results_by_partition), default=0)


def _produce_error(_n: int, answer: Any) -> int:
    return max((int(p.error_code) for t in answer.responses for p in t.partition_responses), default=0)


def _call(port: int, api_key: int, tree: dict[str, Any]) -> Any:
    with WireClient(port, timeout=120) as c:
        return c.call(build(api_key, V[api_key], tree), V[api_key])


def listed(port: int, states: list[str] | None = None) -> list[Any]:
    answer = _call(port, LIST_TRANSACTIONS, {"state_filters": states or [], "producer_id_filters": []})
    assert answer.error_code == 0, answer
    return [t for t in answer.transaction_states if t.transactional_id.startswith("bench-txn-")]


def _until_committed(port: int, count: int, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while len(listed(port, ["CompleteCommit"])) < count:
        assert time.monotonic() < deadline, f"not every one of {count} ids in CompleteCommit in {timeout_s} s"
        time.sleep(0.1)


# -- the measurements ------------------------------------------------------------------------


def _create(comparison: Comparison, server: Server, count: int, size: str) -> None:
    side, port = server.side, _port(server)
    with WireClient(port) as c:
        node = c.metadata([], version=12).brokers[0].node_id

    async def run() -> tuple[float, float]:
        gen = Generator(port, count)
        await gen.connect()
        try:
            await gen.find_coordinators(node)
            started = time.perf_counter()
            await gen.init()
            inited = time.perf_counter()
            await gen.transact()
            await asyncio.get_running_loop().run_in_executor(None, _until_committed, port, count)
            return inited - started, time.perf_counter() - inited
        finally:
            gen.close()

    init_s, txn_s = asyncio.run(run())
    comparison.record(side, f"{size}: InitProducerId of every id", count / init_s, "ids/s", f"{init_s:.1f} s")
    comparison.record(side, f"{size}: one transaction per id, until CompleteCommit", count / txn_s, "txn/s",
                      f"{txn_s:.1f} s")


def _wire_ms(port: int, api_key: int, tree: dict[str, Any]) -> tuple[float, Any]:
    """The p50 of SAMPLES requests, from sending to the answer's last byte (the client's decoding
    is not timed), and the decoded answer."""
    body = encode_body(build(api_key, V[api_key], tree), V[api_key])
    times = []
    with WireClient(port, timeout=120) as c:
        for _ in range(SAMPLES):
            started = time.perf_counter()
            c.send_request(api_key, V[api_key], body)
            payload = c.recv_frame()
            times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), decode(api_key, payload)


def _listings(comparison: Comparison, server: Server, count: int, size: str) -> None:
    side, port = server.side, _port(server)
    ms, answer = _wire_ms(port, LIST_TRANSACTIONS, {"state_filters": [], "producer_id_filters": []})
    found = sum(1 for t in answer.transaction_states if t.transactional_id.startswith("bench-txn-"))
    assert answer.error_code == 0 and found == count, f"ListTransactions lists {found} of {count} ids"
    comparison.record(side, f"{size}: ListTransactions of every id, p50", ms, "ms", higher=False)
    ids = [tid(n) for n in range(0, count, max(1, count // DESCRIBE_BATCH))][:DESCRIBE_BATCH]
    ms, answer = _wire_ms(port, DESCRIBE_TRANSACTIONS, {"transactional_ids": ids})
    states = answer.transaction_states
    assert all(s.error_code == 0 and s.transaction_state == "CompleteCommit" for s in states), states[:3]
    comparison.record(side, f"{size}: DescribeTransactions of {len(ids):,} ids, p50", ms, "ms", higher=False)
    tools = (("gregor transactions list", _gregor_list), ("kafka-transactions.sh list", _kafka_list))
    for tool, run in tools:
        started = time.perf_counter()
        lines = run(server.bootstrap)
        seconds = time.perf_counter() - started
        assert lines >= count, f"{tool} on {side} listed {lines} lines for {count} ids"
        comparison.record(side, f"{size}: {tool} (wall time)", seconds, "s", higher=False)


def _gregor_list(bootstrap: str) -> int:
    done = subprocess.run([*gregor_command(), "transactions", "--bootstrap-server", bootstrap, "list"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout.count("bench-txn-")


def _kafka_list(bootstrap: str) -> int:
    done = kafka_tool("org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", bootstrap, "list",
                      timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout.count("bench-txn-")


def _partition_of(transactional_id: str, partitions: int = 50) -> int:
    h = 0
    for ch in transactional_id:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    h = h - (1 << 32) if h >= 1 << 31 else h
    return (h & 0x7FFFFFFF) % partitions


def _answered(port: int, transactional_id: str) -> bool:
    """An InitProducerId for the id answered NONE (False while the broker is down or loading)."""
    try:
        answer = _call(port, INIT_PRODUCER_ID, {"transactional_id": transactional_id,
                                               "transaction_timeout_ms": TXN_TIMEOUT_MS})
    except (OSError, ConnectionError):
        return False
    if answer.error_code in RETRIABLE:
        return False
    assert answer.error_code == 0, answer
    return True


def _restart(comparison: Comparison, server: Server, count: int, size: str) -> None:
    side, port = server.side, _port(server)
    existing = tid(count - 1)
    new = next(f"bench-new-{n}" for n in range(1000)
               if _partition_of(f"bench-new-{n}") != _partition_of(existing))
    started = _kill9_and_start(server)
    deadline = time.monotonic() + 600
    while not _api_versions(port):
        assert time.monotonic() < deadline, f"{side}: no ApiVersions answered within 600 s of its start"
        time.sleep(0.02)
    seconds = time.perf_counter() - started
    comparison.record(side, f"{size}: kill -9, start, until ApiVersions answered", seconds, "s", higher=False)
    waiting = {existing: "an existing id", new: "a new id"}
    while waiting:
        assert time.monotonic() < deadline, f"{side}: InitProducerId not answered within 600 s: {waiting}"
        for name, what in list(waiting.items()):
            if _answered(port, name):
                seconds = time.perf_counter() - started
                del waiting[name]
                comparison.record(side, f"{size}: kill -9, start, until InitProducerId of {what}", seconds,
                                  "s", higher=False)
        time.sleep(0.02)


def _api_versions(port: int) -> bool:
    try:
        with WireClient(port, timeout=5) as c:
            return bool(c.api_versions().error_code == 0)
    except (OSError, ConnectionError):
        return False


def _kill9_and_start(server: Server) -> float:
    """The broker killed and its process started again; the moment it started (perf_counter)."""
    if isinstance(server, GregorBroker):
        server.broker.kill9()
        started = time.perf_counter()
        server.broker.start(timeout=600)  # the process, until it answers ApiVersions
        return started
    assert isinstance(server, KafkaBroker)
    node = server.node
    assert isinstance(node, KafkaNode)
    node.kill9()
    node.spawn()  # formats (a no-op on its data; not timed), then starts the process
    return time.perf_counter()


def measure(comparison: Comparison, server: Server, count: int) -> None:
    size = f"{count:,} ids"
    server.create_topic(TOPIC, TOPIC_PARTITIONS, 1)
    before = rss_kib(server.pid())
    _create(comparison, server, count, size)
    rss = rss_kib(server.pid())
    comparison.record(server.side, f"{size}: resident memory per id", (rss - before) / count * 1024, "B",
                      f"RSS {rss / 1024:,.0f} MiB, {before / 1024:,.0f} before", higher=False)
    _listings(comparison, server, count, size)
    _restart(comparison, server, count, size)
    if isinstance(server, KafkaBroker) and isinstance(server.node, KafkaNode):
        server.node.wait_ready(120)  # so that the stop at the end finds it serving


# -- producer state, in process (Gregor only) ------------------------------------------------


def producer_state(comparison: Comparison, count: int, base: Path) -> None:
    """`count` producer ids over PRODUCER_PARTITIONS partitions' ProducerStateManagers: their
    snapshots written, then loaded into fresh managers."""
    size = f"{count:,} ids"
    managers = [ProducerStateManager(base / f"p-{i}") for i in range(PRODUCER_PARTITIONS)]
    for m in managers:
        m.directory.mkdir(parents=True)
    now = int(time.time() * 1000)
    for n in range(count):
        offset = Offset(n // PRODUCER_PARTITIONS * 2)
        entry = ProducerStateEntry(ProducerId(1000 + n), ProducerEpoch(0),
                                   (BatchMetadata(0, offset, 0, now),), 0, now)  # type: ignore[arg-type]
        managers[n % PRODUCER_PARTITIONS].update(entry)
    end = Offset(count // PRODUCER_PARTITIONS * 2 + 2)
    started = time.perf_counter()
    for m in managers:
        assert m.take_snapshot(end) is not None
    written = time.perf_counter() - started
    fresh = [ProducerStateManager(m.directory) for m in managers]
    started = time.perf_counter()
    for m in fresh:
        assert m.truncate_and_reload(Offset(0), end, now, 86_400_000) == end
    loaded = time.perf_counter() - started
    assert sum(m.producer_count for m in fresh) == count
    where = f"in process, over {PRODUCER_PARTITIONS} partitions"
    comparison.record(GREGOR, f"{size}: producer-state .snapshot write (Gregor only)", written * 1000, "ms",
                      where, higher=False)
    comparison.record(GREGOR, f"{size}: producer-state .snapshot load (Gregor only)", loaded * 1000, "ms",
                      where, higher=False)
    shutil.rmtree(base)


def main() -> None:
    parser = reference.arguments(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]))
    parser.add_argument("--ids", type=int, nargs="+", default=[1000, 10000],
                        help="sizes to measure, each on fresh brokers (100000: about 12 minutes)")
    parser.add_argument("--sides", nargs="+", default=["gregor", "kafka"], choices=["gregor", "kafka"])
    args = parser.parse_args()
    comparison = Comparison(BENCHMARK)
    starts = dict(zip(("gregor", "kafka"), reference.SINGLE, strict=True))
    for count in args.ids:
        for side in args.sides:
            with tempfile.TemporaryDirectory(prefix="gregor-bench-txn-ids-") as tmp:
                with starts[side](Path(tmp) / f"{count}-{side}", CONFIG) as server:
                    with comparison.attempt(server.side, f"{count:,} ids"):
                        measure(comparison, server, count)
        with tempfile.TemporaryDirectory(prefix="gregor-bench-producer-state-") as tmp:
            producer_state(comparison, count, Path(tmp) / "state")
    comparison.finish(args.update_baseline)


if __name__ == "__main__":
    main()
