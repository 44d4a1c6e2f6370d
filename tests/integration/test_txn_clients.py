"""Transactions through four real clients against a real broker process.

confluent-kafka (librdkafka), kafka-python, aiokafka and the Apache Kafka Java
client (3.9, and 4.3 at transaction.version 2 and 1; driven line by line through
tests/integration/java/TxnDriver.java)
each run the same scenarios through one small adapter (`Kit`): a transactional
producer (init / begin / send / flush / commit / abort) and a consumer that
reads partitions from the beginning up to the end offset of its isolation level
(no consumer group: there is no group coordinator yet, so assign() only).

- commit visible / abort invisible to read_committed, both visible to
  read_uncommitted (the aborted records are flushed before the abort, so they
  are physically in the log);
- a transaction over several topics and partitions is all-or-nothing;
- fencing: a second producer with the same transactional.id aborts the first
  one's open transaction, and the first one's next commit fails as fenced;
- zombie: a producer abandoned mid-transaction is aborted by the coordinator
  after transaction.timeout.ms, the last stable offset moves on, and a new
  producer with the same id works.

Records are identified by their values (ASCII words); every check compares the
exact list of values per partition, in offset order.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import queue
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.integration.harness import (
    REPO_ROOT,
    BrokerProcess,
    java_command,
    require_java,
    started_broker,
    unique_topic,
    wait_until,
)
from tests.integration.wire import WireClient, create_topic

pytestmark = pytest.mark.integration

# The Java client 3.9 (transaction version 1) and 4.3 at a broker finalizing transaction.version
# 2 (it then uses Produce v12+, TxnOffsetCommit v5, EndTxn v5) and 1 (it keeps the older protocol).
CLIENTS = ["confluent", "kafka-python", "aiokafka", "java-3.9", "java-4.3", "java-4.3-tv1"]
TXN_STATE_PARTITIONS = 3
# Broker settings for every transaction test: few __transaction_state partitions
# (fast creation) and a coordinator that looks for timed-out transactions often.
TXN_BROKER_OVERRIDES = {
    "transaction.state.log.num.partitions": TXN_STATE_PARTITIONS,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200,
}
ZOMBIE_TIMEOUT_MS = 2000
COMMITTED, UNCOMMITTED = "read_committed", "read_uncommitted"

# (topic, partition, offset, value)
Got = tuple[str, int, int, str]
TP = tuple[str, int]


# -- broker and topics ------------------------------------------------------------------


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with started_broker(tmp_path_factory.mktemp("txn-broker"), TXN_BROKER_OVERRIDES) as b:
        yield b


def create_topics(broker: BrokerProcess, topics: dict[str, int]) -> None:
    with WireClient(broker.port) as c:
        for name, partitions in topics.items():
            create_topic(c, name, partitions)


def tid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def values(got: list[Got], topic: str | None = None, partition: int | None = None) -> list[str]:
    return [
        v for t, p, _o, v in got if (topic is None or t == topic) and (partition is None or p == partition)
    ]


def by_partition(got: list[Got]) -> dict[TP, list[str]]:
    out: dict[TP, list[str]] = {}
    for t, p, _o, v in got:
        out.setdefault((t, p), []).append(v)
    return out


def assert_offset_order(got: list[Got]) -> None:
    last: dict[TP, int] = {}
    for t, p, o, v in got:
        assert o > last.get((t, p), -1), f"{t}-{p}: {v!r} at offset {o} after offset {last[(t, p)]}"
        last[(t, p)] = o


# -- the adapters: one transactional producer API over four clients -----------------------


class TxnProducer:
    """init / begin / send / flush / commit / abort / close of one client's producer."""

    def init(self) -> None: ...
    def begin(self) -> None: ...
    def send(self, topic: str, partition: int, value: str) -> None: ...
    def flush(self) -> list[int]:
        """Wait until every send since the last flush is acknowledged; their offsets."""
        ...

    def commit(self) -> None: ...
    def abort(self) -> None: ...
    def close(self) -> None: ...

    def abandon(self) -> None:
        """Stop using the producer mid-transaction (the Java one dies with its JVM)."""

    def settle(self) -> None:
        """Wait until what the client does on its own after a failed send has ended."""

    def send_all(self, items: list[tuple[str, int, str]]) -> list[int]:
        for t, p, v in items:
            self.send(t, p, v)
        return self.flush()


class ConfluentTxn(TxnProducer):
    def __init__(self, bootstrap: str, transactional_id: str, timeout_ms: int) -> None:
        self.p = Producer(
            {
                "bootstrap.servers": bootstrap,
                "transactional.id": transactional_id,
                "transaction.timeout.ms": timeout_ms,
                "message.timeout.ms": min(timeout_ms, 30000),
                "linger.ms": 0,
                "retry.backoff.ms": 50,
                "reconnect.backoff.ms": 20,
                "error_cb": self._on_error,
            }
        )
        self.offsets: list[int] = []
        self.errors: list[Any] = []
        self.fatal: list[Any] = []

    def _on_error(self, err: Any) -> None:
        if err.fatal():
            self.fatal.append(err)

    def _cb(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            self.offsets.append(msg.offset())

    def init(self) -> None:
        self.p.init_transactions(30)

    def begin(self) -> None:
        self.p.begin_transaction()

    def send(self, topic: str, partition: int, value: str) -> None:
        self.p.produce(topic, value=value.encode(), partition=partition, on_delivery=self._cb)
        self.p.poll(0)

    def flush(self) -> list[int]:
        try:
            left = self.p.flush(30)
        except SystemError:
            # confluent-kafka's flush can return NULL without an exception when a fatal error
            # (a fenced producer) arrives during it; the error callback holds that error
            self.p.poll(0)
            if not self.fatal:
                raise
            left = 0
        errors, self.errors = self.errors, []
        if self.fatal:
            raise KafkaException(self.fatal[0])
        if errors:
            raise KafkaException(errors[0])
        assert left == 0, f"{left} messages not delivered"
        offsets, self.offsets = self.offsets, []
        return offsets

    def commit(self) -> None:
        self.p.commit_transaction(30)

    def abort(self) -> None:
        self.p.abort_transaction(30)

    def close(self) -> None:
        self.p.flush(0)
        del self.p  # librdkafka destroys the handle now, not when the broker is already gone


def txn_producer_kwargs(bootstrap: str, transactional_id: str, timeout_ms: int) -> dict[str, Any]:
    """The KafkaProducer / AIOKafkaProducer settings the transactional producers share."""
    return {
        "bootstrap_servers": bootstrap,
        "transactional_id": transactional_id,
        "transaction_timeout_ms": timeout_ms,
        "acks": "all",
        "linger_ms": 0,
        "retry_backoff_ms": 50,
        "request_timeout_ms": 15000,
    }


def read_kwargs(bootstrap: str, isolation: str) -> dict[str, Any]:
    """KafkaConsumer / AIOKafkaConsumer settings for reading everything with assign()."""
    return {
        "bootstrap_servers": bootstrap,
        "group_id": None,
        "enable_auto_commit": False,
        "isolation_level": isolation,
        "fetch_max_wait_ms": 50,
    }


def got_of(tp: Any, msgs: list[Any]) -> list[Got]:
    """kafka-python / aiokafka messages of one partition as (topic, partition, offset, value)."""
    return [(tp.topic, tp.partition, m.offset, (m.value or b"").decode()) for m in msgs]


class KafkaPythonTxn(TxnProducer):
    def __init__(self, bootstrap: str, transactional_id: str, timeout_ms: int) -> None:
        from kafka import KafkaProducer

        self.p = KafkaProducer(
            **txn_producer_kwargs(bootstrap, transactional_id, timeout_ms),
            reconnect_backoff_ms=20,
            max_block_ms=30000,
        )
        self.futures: list[Any] = []

    def init(self) -> None:
        self.p.init_transactions()

    def begin(self) -> None:
        self.p.begin_transaction()

    def send(self, topic: str, partition: int, value: str) -> None:
        self.futures.append(self.p.send(topic, value=value.encode(), partition=partition))

    def flush(self) -> list[int]:
        self.p.flush(timeout=30)
        futures, self.futures = self.futures, []
        return [f.get(timeout=30).offset for f in futures]

    def commit(self) -> None:
        self.p.commit_transaction()

    def abort(self) -> None:
        self.p.abort_transaction()

    def close(self) -> None:
        self.p.close(timeout=5)

    def settle(self) -> None:
        """A send that failed with INVALID_PRODUCER_EPOCH makes kafka-python bump its epoch in the
        background (KIP-360: InitProducerId with its producer id and old epoch). Until the
        coordinator has fenced that request, it can still abort another producer's Ongoing
        transaction of the same id, as Kafka's coordinator does (it checks only the producer id
        there). The client exposes its state only on its transaction manager."""
        from kafka.producer.transaction_manager import TransactionState

        manager = self.p._transaction_manager
        wait_until(
            lambda: manager._current_state != TransactionState.BUMPING_PRODUCER_EPOCH,
            timeout=30,
            msg="kafka-python's epoch bump ends",
        )


class AioLoop:
    """A private event loop so the async clients can be driven from a sync test."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def run(self, coro: Any, timeout: float = 60) -> Any:
        return self.loop.run_until_complete(asyncio.wait_for(coro, timeout))

    def close(self) -> None:
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()


class AiokafkaTxn(TxnProducer):
    def __init__(self, aio: AioLoop, bootstrap: str, transactional_id: str, timeout_ms: int) -> None:
        from aiokafka import AIOKafkaProducer

        async def make() -> Any:
            return AIOKafkaProducer(
                **txn_producer_kwargs(bootstrap, transactional_id, timeout_ms), enable_idempotence=True
            )

        self.aio = aio
        self.p = aio.run(make())
        self.futures: list[Any] = []
        self.started = False

    def init(self) -> None:
        self.aio.run(self.p.start())  # start() runs InitProducerId for a transactional id
        self.started = True

    def begin(self) -> None:
        self.aio.run(self.p.begin_transaction())

    def send(self, topic: str, partition: int, value: str) -> None:
        self.futures.append(self.aio.run(self.p.send(topic, value=value.encode(), partition=partition)))

    def flush(self) -> list[int]:
        async def go() -> list[int]:
            await self.p.flush()
            futures, self.futures = self.futures, []
            return [(await f).offset for f in futures]

        return list(self.aio.run(go()))

    def commit(self) -> None:
        self.aio.run(self.p.commit_transaction())

    def abort(self) -> None:
        self.aio.run(self.p.abort_transaction())

    def close(self) -> None:
        for f in self.futures:  # never awaited (abandoned or failed): silence their errors
            if f.done() and not f.cancelled():
                f.exception()
        self.aio.run(self.p.stop(), timeout=20)


class JavaError(Exception):
    def __init__(self, command: str, info: dict[str, Any]) -> None:
        self.chain: list[str] = info.get("chain", [])
        super().__init__(f"{command!r} failed in Java: {self.chain} {info.get('message')}")


class JavaDriver:
    """One JVM running TxnDriver.java; `call` sends a command line and waits for its answer."""

    def __init__(self, bootstrap: str, client: str = "3.9") -> None:
        require_java(client)
        self.proc = subprocess.Popen(
            java_command("TxnDriver.java", bootstrap, client=client),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO_ROOT,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines.put), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.proc.stderr, self.stderr.append), daemon=True).start()
        self._answer("(start-up)", timeout=60)

    @staticmethod
    def _pump(stream: Any, sink: Callable[[Any], None]) -> None:
        for line in stream:
            sink(line)
        sink(None)

    def _answer(self, command: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"Java: no answer to {command!r} in {timeout}s\n{self.err()}") from None
            if line is None:
                raise AssertionError(f"Java driver exited during {command!r}\n{self.err()}")
            if not line.startswith("@@ "):
                continue
            status, _, payload = line[3:].strip().partition(" ")
            info = json.loads(payload)
            if status != "OK":
                raise JavaError(command, info)
            return dict(info)

    def err(self) -> str:
        return "--- java stderr ---\n" + "".join(x for x in self.stderr[-60:] if x)

    def call(self, command: str, timeout: float = 60) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self._answer(command, timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for s in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            with contextlib.suppress(Exception):
                s.close()  # type: ignore[union-attr]

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(Exception):
                self.call("exit", timeout=20)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        self.kill()


class JavaTxn(TxnProducer):
    def __init__(self, driver: JavaDriver, name: str, transactional_id: str, timeout_ms: int) -> None:
        self.d = driver
        self.name = name
        self.d.call(f"producer {name} {transactional_id} {timeout_ms}")

    def init(self) -> None:
        self.d.call(f"init {self.name}")

    def begin(self) -> None:
        self.d.call(f"begin {self.name}")

    def send(self, topic: str, partition: int, value: str) -> None:
        self.d.call(f"send {self.name} {topic} {partition} {value}")

    def flush(self) -> list[int]:
        return list(self.d.call(f"flush {self.name}")["offsets"])

    def commit(self) -> None:
        self.d.call(f"commit {self.name}")

    def abort(self) -> None:
        self.d.call(f"abort {self.name}")

    def close(self) -> None:
        if self.d.proc.poll() is None:
            self.d.call(f"close {self.name}")

    def abandon(self) -> None:
        self.d.kill()


# -- kits: a client's producers plus its consumer -------------------------------------------


class Kit:
    """Everything one client does in these tests; closes all it made."""

    name = ""

    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self.bootstrap = broker.bootstrap
        self.producers: list[TxnProducer] = []

    def producer(
        self, transactional_id: str, timeout_ms: int = 60000, own_process: bool = False
    ) -> TxnProducer:
        p = self._producer(transactional_id, timeout_ms, own_process)
        self.producers.append(p)
        return p

    def _producer(self, transactional_id: str, timeout_ms: int, own_process: bool) -> TxnProducer:
        raise NotImplementedError

    def consume(self, tps: list[TP], isolation: str) -> list[Got]:
        """Every record of `tps` from the beginning up to the end offset of `isolation`."""
        raise NotImplementedError

    def end_offsets(self, tps: list[TP], isolation: str) -> dict[TP, int] | None:
        """The client's own ListOffsets latest with `isolation`; None if the client has none
        (confluent's get_watermark_offsets is the high watermark whatever the isolation)."""
        return None

    def is_fenced(self, exc: BaseException) -> bool:
        raise NotImplementedError

    def close(self) -> None:
        for p in self.producers:
            with contextlib.suppress(Exception):
                p.close()


class ConfluentKit(Kit):
    name = "confluent"

    def _producer(self, transactional_id: str, timeout_ms: int, own_process: bool) -> TxnProducer:
        return ConfluentTxn(self.bootstrap, transactional_id, timeout_ms)

    def consume(self, tps: list[TP], isolation: str) -> list[Got]:
        return confluent_consume(self.bootstrap, tps, isolation)

    def is_fenced(self, exc: BaseException) -> bool:
        # A fatal error raised inside a delivery callback reaches Python as a SystemError
        # whose cause is the KafkaException.
        while isinstance(exc, SystemError) and (exc.__cause__ or exc.__context__):
            exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
        if not isinstance(exc, KafkaException):
            return False
        code = exc.args[0].code()
        return code in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)


def confluent_consume(bootstrap: str, tps: list[TP], isolation: str, timeout: float = 20) -> list[Got]:
    """Read with librdkafka until partition EOF (at the LSO for read_committed) on every partition."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "gregor-txn-unused",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
            "fetch.wait.max.ms": 50,
        }
    )
    got: list[Got] = []
    at_eof: set[TP] = set()
    try:
        c.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in tps])
        deadline = time.monotonic() + timeout
        while len(at_eof) < len(set(tps)):
            assert time.monotonic() < deadline, f"no EOF on {set(tps) - at_eof} within {timeout}s"
            m = c.poll(0.1)
            if m is None:
                continue
            if m.error() is not None:
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                at_eof.add((m.topic(), m.partition()))
                continue
            got.append((m.topic(), m.partition(), m.offset(), (m.value() or b"").decode()))
    finally:
        c.close()
    return got


class KafkaPythonKit(Kit):
    name = "kafka-python"

    def _producer(self, transactional_id: str, timeout_ms: int, own_process: bool) -> TxnProducer:
        return KafkaPythonTxn(self.bootstrap, transactional_id, timeout_ms)

    def consume(self, tps: list[TP], isolation: str) -> list[Got]:
        from kafka import KafkaConsumer
        from kafka import TopicPartition as KTP

        c = KafkaConsumer(**read_kwargs(self.bootstrap, isolation))
        got: list[Got] = []
        try:
            ktps = [KTP(t, p) for t, p in tps]
            c.assign(ktps)
            c.seek_to_beginning(*ktps)
            end = c.end_offsets(ktps)
            deadline = time.monotonic() + 20
            while any(c.position(tp) < end[tp] for tp in ktps):
                assert time.monotonic() < deadline, f"kafka-python did not reach {end}"
                for tp, msgs in c.poll(timeout_ms=100).items():
                    got.extend(got_of(tp, msgs))
        finally:
            c.close()
        return sorted(got)

    def end_offsets(self, tps: list[TP], isolation: str) -> dict[TP, int]:
        from kafka import KafkaConsumer
        from kafka import TopicPartition as KTP

        c = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None, isolation_level=isolation)
        try:
            ends = c.end_offsets([KTP(t, p) for t, p in tps])
            return {(tp.topic, tp.partition): o for tp, o in ends.items()}
        finally:
            c.close()

    def is_fenced(self, exc: BaseException) -> bool:
        import kafka.errors as E

        return isinstance(exc, E.ProducerFencedError | E.InvalidProducerEpochError)


class AiokafkaKit(Kit):
    name = "aiokafka"

    def __init__(self, broker: BrokerProcess) -> None:
        super().__init__(broker)
        self.aio = AioLoop()

    def _producer(self, transactional_id: str, timeout_ms: int, own_process: bool) -> TxnProducer:
        return AiokafkaTxn(self.aio, self.bootstrap, transactional_id, timeout_ms)

    def consume(self, tps: list[TP], isolation: str) -> list[Got]:
        from aiokafka import AIOKafkaConsumer
        from aiokafka import TopicPartition as ATP

        async def go() -> list[Got]:
            c = AIOKafkaConsumer(**read_kwargs(self.bootstrap, isolation))
            await c.start()
            got: list[Got] = []
            try:
                atps = [ATP(t, p) for t, p in tps]
                c.assign(atps)
                await c.seek_to_beginning(*atps)
                end = await c.end_offsets(atps)
                while True:
                    positions = [await c.position(tp) for tp in atps]
                    if all(pos >= end[tp] for pos, tp in zip(positions, atps, strict=True)):
                        break
                    batch = await c.getmany(timeout_ms=100)
                    for tp, msgs in batch.items():
                        got.extend(got_of(tp, msgs))
            finally:
                await c.stop()
            return sorted(got)

        return list(self.aio.run(go(), timeout=30))

    def end_offsets(self, tps: list[TP], isolation: str) -> dict[TP, int]:
        from aiokafka import AIOKafkaConsumer
        from aiokafka import TopicPartition as ATP

        async def go() -> dict[TP, int]:
            c = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None, isolation_level=isolation)
            await c.start()
            try:
                ends = await c.end_offsets([ATP(t, p) for t, p in tps])
            finally:
                await c.stop()
            return {(tp.topic, tp.partition): o for tp, o in ends.items()}

        return dict(self.aio.run(go(), timeout=30))

    def is_fenced(self, exc: BaseException) -> bool:
        import aiokafka.errors as E

        return isinstance(exc, E.ProducerFenced | E.InvalidProducerEpoch)

    def close(self) -> None:
        super().close()
        self.aio.close()


class JavaKit(Kit):
    name = "java"
    client = "3.9"

    def __init__(self, broker: BrokerProcess) -> None:
        super().__init__(broker)
        self.driver = JavaDriver(self.bootstrap, self.client)
        self.drivers = [self.driver]
        self.count = 0

    def _producer(self, transactional_id: str, timeout_ms: int, own_process: bool) -> TxnProducer:
        driver = self.driver
        if own_process:
            driver = JavaDriver(self.bootstrap, self.client)
            self.drivers.append(driver)
        self.count += 1
        return JavaTxn(driver, f"p{self.count}", transactional_id, timeout_ms)

    def consume(self, tps: list[TP], isolation: str) -> list[Got]:
        spec = " ".join(f"{t}:{p}" for t, p in tps)
        records = self.driver.call(f"consume {isolation} {spec}")["records"]
        return [(t, p, o, v) for t, p, o, v in records]

    def end_offsets(self, tps: list[TP], isolation: str) -> dict[TP, int]:
        spec = " ".join(f"{t}:{p}" for t, p in tps)
        ends = self.driver.call(f"end_offsets {isolation} {spec}")
        return {(k.rsplit(":", 1)[0], int(k.rsplit(":", 1)[1])): v for k, v in ends.items()}

    def is_fenced(self, exc: BaseException) -> bool:
        fenced = {
            "org.apache.kafka.common.errors.ProducerFencedException",
            "org.apache.kafka.common.errors.InvalidProducerEpochException",
        }
        return isinstance(exc, JavaError) and bool(fenced & set(exc.chain))

    def close(self) -> None:
        super().close()
        for d in self.drivers:
            d.close()


class Java43Kit(JavaKit):
    name = "java-4.3"
    client = "4.3"


KITS: dict[str, type[Kit]] = {
    "confluent": ConfluentKit,
    "kafka-python": KafkaPythonKit,
    "aiokafka": AiokafkaKit,
    "java-3.9": JavaKit,
    "java-4.3": Java43Kit,
    "java-4.3-tv1": Java43Kit,
}


@pytest.fixture(scope="module")
def txn_broker_tv1(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker finalizing transaction.version 1, for the Java 4.3 client's older protocol."""
    overrides = {**TXN_BROKER_OVERRIDES, "transaction.version": 1}
    with started_broker(tmp_path_factory.mktemp("txn-broker-tv1"), overrides) as b:
        yield b


@pytest.fixture(
    params=[pytest.param(c, marks=[pytest.mark.java] if c.startswith("java") else []) for c in CLIENTS]
)
def kit(request: pytest.FixtureRequest) -> Iterator[Kit]:
    broker = request.getfixturevalue("txn_broker_tv1" if request.param.endswith("tv1") else "txn_broker")
    k = KITS[request.param](broker)
    try:
        yield k
    finally:
        k.close()


# -- wire-level helpers shared with test_txn_semantics ---------------------------------------


def list_offsets(broker: BrokerProcess, topic: str, partition: int, isolation_level: int) -> int:
    """ListOffsets v2 latest (-1) with the given isolation level (0 = HW, 1 = LSO)."""
    from protocol.messages import REQUESTS

    cls = REQUESTS[2]
    part = cls.ListOffsetsTopic.ListOffsetsPartition
    msg = cls(
        version=2,
        replica_id=-1,
        isolation_level=isolation_level,
        topics=[cls.ListOffsetsTopic(name=topic, partitions=[part(partition_index=partition, timestamp=-1)])],
    )
    with WireClient(broker.port) as c:
        resp = c.call(msg, 2)
    p = resp.topics[0].partitions[0]
    assert p.error_code == 0, f"ListOffsets {topic}-{partition} isolation {isolation_level}: {p}"
    return int(p.offset)


def describe_transaction(broker: BrokerProcess, transactional_id: str) -> Any:
    from protocol.messages import REQUESTS

    with WireClient(broker.port) as c:
        resp = c.call(REQUESTS[65](version=0, transactional_ids=[transactional_id]), 0)
    (state,) = resp.transaction_states
    assert state.error_code == 0, state
    return state


def list_transactions(broker: BrokerProcess) -> dict[str, str]:
    """transactional id -> state name, from ListTransactions v0 without filters."""
    from protocol.messages import REQUESTS

    with WireClient(broker.port) as c:
        resp = c.call(REQUESTS[66](version=0, state_filters=[], producer_id_filters=[]), 0)
    assert resp.error_code == 0, resp
    return {s.transactional_id: s.transaction_state for s in resp.transaction_states}


# -- the tests ---------------------------------------------------------------------------------


def test_commit_visible_abort_invisible(kit: Kit) -> None:
    txn_broker = kit.broker
    topic = unique_topic(f"txn-ca-{kit.name}")
    create_topics(txn_broker, {topic: 1})
    tps = [(topic, 0)]
    committed1 = [f"c1-{i}" for i in range(5)]
    aborted = [f"ab-{i}" for i in range(4)]
    committed2 = [f"c2-{i}" for i in range(3)]

    p = kit.producer(tid(f"ca-{kit.name}"))
    p.init()
    p.begin()
    assert p.send_all([(topic, 0, v) for v in committed1]) == [0, 1, 2, 3, 4]
    p.commit()

    p.begin()
    offsets = p.send_all([(topic, 0, v) for v in aborted])
    assert offsets == [6, 7, 8, 9], "aborted records come after data 0-4 and the COMMIT marker at 5"
    # They really are in the log before the abort: read_uncommitted sees them, read_committed not yet.
    assert values(kit.consume(tps, UNCOMMITTED)) == committed1 + aborted
    assert values(kit.consume(tps, COMMITTED)) == committed1
    p.abort()

    p.begin()
    assert p.send_all([(topic, 0, v) for v in committed2]) == [11, 12, 13]
    p.commit()

    got = kit.consume(tps, COMMITTED)
    assert values(got) == committed1 + committed2
    assert [o for *_, o, _v in got] == [0, 1, 2, 3, 4, 11, 12, 13]
    got_all = kit.consume(tps, UNCOMMITTED)
    assert values(got_all) == committed1 + aborted + committed2
    assert [o for *_, o, _v in got_all] == [0, 1, 2, 3, 4, 6, 7, 8, 9, 11, 12, 13]
    # librdkafka reads the same thing (it filters with the broker's abortedTransactions).
    assert values(confluent_consume(kit.bootstrap, tps, COMMITTED)) == committed1 + committed2
    assert list_offsets(txn_broker, topic, 0, 1) == list_offsets(txn_broker, topic, 0, 0) == 15


def test_multi_topic_partition_all_or_nothing(kit: Kit) -> None:
    txn_broker = kit.broker
    a, b = unique_topic(f"txn-ma-{kit.name}"), unique_topic(f"txn-mb-{kit.name}")
    create_topics(txn_broker, {a: 3, b: 2})
    tps = [(a, 0), (a, 1), (a, 2), (b, 0), (b, 1)]

    def items(tag: str) -> list[tuple[str, int, str]]:
        return [(t, p, f"{tag}-{t[-4:]}-{p}-{i}") for i in range(3) for t, p in tps]

    p = kit.producer(tid(f"multi-{kit.name}"))
    p.init()
    p.begin()
    committed = items("com")
    assert len(p.send_all(committed)) == len(committed)
    p.commit()

    p.begin()
    aborted = items("abo")
    assert len(p.send_all(aborted)) == len(aborted)
    half = kit.consume(tps, UNCOMMITTED)
    assert len(half) == len(committed) + len(aborted), "the aborted records reached every partition"
    p.abort()

    p.begin()
    committed2 = items("cm2")
    p.send_all(committed2)
    p.commit()

    def expect(*groups: list[tuple[str, int, str]]) -> dict[TP, list[str]]:
        out: dict[TP, list[str]] = {}
        for group in groups:
            for t, part, v in group:
                out.setdefault((t, part), []).append(v)
        return out

    got = kit.consume(tps, COMMITTED)
    assert_offset_order(got)
    assert by_partition(got) == expect(committed, committed2)
    got_all = kit.consume(tps, UNCOMMITTED)
    assert by_partition(got_all) == expect(committed, aborted, committed2)


@pytest.mark.parametrize("next_step", ["send", "commit"])
def test_second_producer_fences_first(kit: Kit, next_step: str) -> None:
    """next_step "send": the fenced producer's next Produce (old epoch) must fail as fenced;
    "commit": its EndTxn must. Either way the open transaction was aborted by the second init."""
    txn_broker = kit.broker
    topic = unique_topic(f"txn-fence-{kit.name}")
    create_topics(txn_broker, {topic: 1})
    tps = [(topic, 0)]
    transactional_id = tid(f"fence-{kit.name}")

    first = kit.producer(transactional_id)
    first.init()
    first.begin()
    assert first.send_all([(topic, 0, f"zombie-{i}") for i in range(3)]) == [0, 1, 2]
    assert list_offsets(txn_broker, topic, 0, 1) == 0, "open transaction: LSO at its first offset"
    epoch_before = describe_transaction(txn_broker, transactional_id).producer_epoch

    second = kit.producer(transactional_id)
    second.init()  # aborts the first producer's open transaction
    state = describe_transaction(txn_broker, transactional_id)
    assert state.transaction_state in ("Empty", "CompleteAbort"), state
    assert state.producer_epoch > epoch_before, state
    assert list_offsets(txn_broker, topic, 0, 1) == 4, "zombie data 0-2 and its ABORT marker at 3 are decided"
    assert kit.consume(tps, COMMITTED) == []

    with pytest.raises(Exception) as info:  # noqa: B017 - each client has its own fenced error
        if next_step == "send":
            first.send(topic, 0, "zombie-late")
            first.flush()
        first.commit()
    assert kit.is_fenced(info.value), f"{kit.name}: expected a fenced error, got {info.value!r}"
    first.settle()

    second.begin()
    second.send_all([(topic, 0, f"live-{i}") for i in range(2)])
    second.commit()

    assert values(kit.consume(tps, COMMITTED)) == ["live-0", "live-1"]
    # The fenced late record never reached the log (the broker rejects its old epoch).
    assert values(kit.consume(tps, UNCOMMITTED)) == ["zombie-0", "zombie-1", "zombie-2", "live-0", "live-1"]


def test_abandoned_transaction_times_out(kit: Kit) -> None:
    txn_broker = kit.broker
    topic = unique_topic(f"txn-zombie-{kit.name}")
    create_topics(txn_broker, {topic: 1})
    tps = [(topic, 0)]
    transactional_id = tid(f"zombie-{kit.name}")

    # The Java checks below start consumers in a JVM: on a loaded machine they need longer than
    # 2 s, and they must all happen before the coordinator aborts.
    zombie_timeout_ms = ZOMBIE_TIMEOUT_MS * (3 if kit.name.startswith("java") else 1)
    zombie = kit.producer(transactional_id, timeout_ms=zombie_timeout_ms, own_process=True)
    zombie.init()
    zombie.begin()
    assert zombie.send_all([(topic, 0, f"zombie-{i}") for i in range(3)]) == [0, 1, 2]
    started = time.monotonic()
    zombie.abandon()

    plain = Producer({"bootstrap.servers": kit.bootstrap, "linger.ms": 0})
    plain.produce(topic, value=b"after-zombie", partition=0)
    assert plain.flush(10) == 0

    # Held back by the open transaction: nothing visible to read_committed yet.
    assert list_offsets(txn_broker, topic, 0, 1) == 0
    assert list_offsets(txn_broker, topic, 0, 0) == 4
    assert kit.consume(tps, COMMITTED) == []
    assert kit.end_offsets(tps, COMMITTED) in ({(topic, 0): 0}, None)
    assert kit.end_offsets(tps, UNCOMMITTED) in ({(topic, 0): 4}, None)
    assert describe_transaction(txn_broker, transactional_id).transaction_state == "Ongoing"

    # The coordinator aborts it once transaction.timeout.ms has passed.
    wait_until(lambda: list_offsets(txn_broker, topic, 0, 1) == 5, timeout=15, msg="LSO past the zombie")
    assert time.monotonic() - started >= zombie_timeout_ms / 1000 - 0.5, "aborted before its timeout"
    state = describe_transaction(txn_broker, transactional_id)
    assert state.transaction_state == "CompleteAbort", state
    assert list_transactions(txn_broker)[transactional_id] == "CompleteAbort"

    assert values(kit.consume(tps, COMMITTED)) == ["after-zombie"]
    assert kit.end_offsets(tps, COMMITTED) in ({(topic, 0): 5}, None)
    assert values(kit.consume(tps, UNCOMMITTED)) == ["zombie-0", "zombie-1", "zombie-2", "after-zombie"]

    fresh = kit.producer(transactional_id)
    fresh.init()
    fresh.begin()
    fresh.send_all([(topic, 0, "fresh-0")])
    fresh.commit()
    assert values(kit.consume(tps, COMMITTED)) == ["after-zombie", "fresh-0"]
    assert describe_transaction(txn_broker, transactional_id).transaction_state == "CompleteCommit"
    # the Java zombie died with its JVM; the others try again and are fenced
    if not kit.name.startswith("java"):
        with pytest.raises(Exception) as info:  # noqa: B017 - each client has its own fenced error
            zombie.send(topic, 0, "zombie-late")
            zombie.flush()
            zombie.commit()
        assert kit.is_fenced(info.value), f"{kit.name}: expected a fenced error, got {info.value!r}"
        assert "zombie-late" not in values(kit.consume(tps, UNCOMMITTED))


def test_a_commit_after_the_coordinator_aborted_on_timeout_is_fenced(kit: Kit) -> None:
    """The coordinator aborts a transaction at its timeout while its producer is still there;
    that producer's commit then fails as fenced, at every transaction version. Under version 2
    the abort bumped the epoch, so the commit looks like a retry of an EndTxn and found the
    transaction CompleteAbort: Kafka answered INVALID_TXN_STATE there, fatal for the Java
    client, until it answered PRODUCER_FENCED (KAFKA-20785), as Gregor does."""
    topic = unique_topic(f"txn-late-commit-{kit.name}")
    create_topics(kit.broker, {topic: 1})
    transactional_id = tid(f"late-commit-{kit.name}")
    timeout_ms = ZOMBIE_TIMEOUT_MS * (3 if kit.name.startswith("java") else 1)  # a JVM's first send
    late = kit.producer(transactional_id, timeout_ms=timeout_ms)
    late.init()
    late.begin()
    assert late.send_all([(topic, 0, "late-0")]) == [0]
    state = lambda: describe_transaction(kit.broker, transactional_id).transaction_state  # noqa: E731
    wait_until(lambda: state() == "CompleteAbort", timeout=20, msg="the coordinator aborts at the timeout")
    with pytest.raises(Exception) as info:  # noqa: B017 - each client has its own fenced error
        late.commit()
    assert kit.is_fenced(info.value), f"{kit.name}: expected a fenced error, got {info.value!r}"
    assert kit.consume([(topic, 0)], COMMITTED) == []


def describe_producer(broker: BrokerProcess, topic: str, partition: int) -> Any:
    """DescribeProducers v0 of one partition: its one active producer."""
    from protocol.messages import REQUESTS

    cls = REQUESTS[61]
    with WireClient(broker.port) as c:
        resp = c.call(cls(topics=[cls.TopicRequest(name=topic, partition_indexes=[partition])]), 0)
    (part,) = resp.topics[0].partitions
    assert part.error_code == 0, part
    (state,) = part.active_producers
    return state


def write_marker(
    broker: BrokerProcess, state: Any, topic: str, commit: bool, transaction_version: int
) -> int:
    """WriteTxnMarkers v2 of one partition, as a transaction coordinator sends it."""
    from protocol.messages import REQUESTS

    cls = REQUESTS[27]
    marker = cls.WritableTxnMarker(
        producer_id=state.producer_id,
        producer_epoch=state.producer_epoch,
        transaction_result=commit,
        coordinator_epoch=state.coordinator_epoch,
        transaction_version=transaction_version,
        topics=[cls.WritableTxnMarker.WritableTxnMarkerTopic(name=topic, partition_indexes=[0])],
    )
    with WireClient(broker.port) as c:
        resp = c.call(cls(markers=[marker]), 2)
    return int(resp.markers[0].topics[0].partitions[0].error_code)


@pytest.mark.java
def test_a_late_marker_of_the_previous_transaction_cannot_end_the_open_one(txn_broker: BrokerProcess) -> None:
    """KIP-1228, with the Java 4.3 client at transaction version 2: a transaction's COMMIT
    marker carries the epoch the coordinator bumped to, the epoch of the producer's next
    transaction. The same marker arriving again while that next transaction is open (a
    coordinator's late retry) is refused, INVALID_PRODUCER_EPOCH; Kafka's older check (at
    or above the producer's epoch) took it and committed the open transaction's records."""
    kit = Java43Kit(txn_broker)
    try:
        topic = unique_topic("txn-late-marker")
        create_topics(txn_broker, {topic: 1})
        tps = [(topic, 0)]
        p = kit.producer(tid("late-marker"))
        p.init()
        p.begin()
        assert p.send_all([(topic, 0, "first")]) == [0]
        p.commit()
        p.begin()
        assert p.send_all([(topic, 0, "second")]) == [2]  # after the COMMIT marker, at the bumped epoch
        state = describe_producer(txn_broker, topic, 0)
        assert state.current_txn_start_offset == 2, state
        late = write_marker(txn_broker, state, topic, commit=True, transaction_version=2)
        assert late == 47  # INVALID_PRODUCER_EPOCH
        assert list_offsets(txn_broker, topic, 0, 1) == 2  # the transaction is still open
        assert values(kit.consume(tps, COMMITTED)) == ["first"]
        p.abort()
        assert values(kit.consume(tps, COMMITTED)) == ["first"]
        assert values(kit.consume(tps, UNCOMMITTED)) == ["first", "second"]
    finally:
        kit.close()
