"""Record validation (storage/validator.py) against a real broker, byte by byte.

Each bad batch carries a valid CRC, so only the record walk can catch it. Every
case asserts the Produce answer (error code, and Produce v8+ record_errors and
error_message where Kafka sends them), that the log end offset did not move, and
that a real consumer still reads the partition cleanly to its end (then a valid
produce gets the next offset: nothing partial was appended).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from protocol.errors import ErrorCode
from protocol.messages import REQUESTS
from protocol.record_batch import COMPRESSION_MASK, TIMESTAMP_TYPE_MASK, BatchHeader, Compression
from tests.integration.clients import read_to_eof
from tests.integration.harness import BrokerProcess, started_broker, unique_topic
from tests.integration.wire import WireClient, build_batch, fix_crc, produce_request
from tests.unit.storage.test_validator import batch, record

PRODUCE_VERSION = 9  # record_errors and error_message are v8+
AFTER_MAX_MS = 3_600_000  # broker-wide log.message.timestamp.after.max.ms
SEGMENT = "00000000000000000000.log"


@pytest.fixture(scope="module")
def gregor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = {"log.message.timestamp.after.max.ms": AFTER_MAX_MS}
    with started_broker(tmp_path_factory.mktemp("validation"), overrides) as b:
        yield b


@dataclass
class Partition:
    broker: BrokerProcess
    client: WireClient
    topic: str
    values: list[bytes]

    def produce(self, records: bytes, acks: int = -1) -> Any:
        msg = produce_request(self.topic, [(0, records)], acks=acks, version=PRODUCE_VERSION)
        resp = self.client.call(msg, PRODUCE_VERSION)
        return resp.responses[0].partition_responses[0]

    def reject(self, records: bytes, error: ErrorCode) -> Any:
        """Produce `records`, expect `error`, and check nothing was stored."""
        part = self.produce(records)
        assert part.error_code == error, part
        assert part.base_offset == -1
        self.assert_unharmed()
        return part

    def assert_unharmed(self) -> None:
        assert self.client.log_end_offset(self.topic) == len(self.values)
        got = read_to_eof(self.broker.bootstrap, [(self.topic, 0)], "read_uncommitted", "validation",
                          20, self.topic)
        assert [m.value() for _tp, m in got] == self.values
        after = self.produce(build_batch([b"after"], keys=[b"k"]))
        assert (after.error_code, after.base_offset) == (0, len(self.values)), after
        self.values.append(b"after")


def create(c: WireClient, topic: str, configs: dict[str, str]) -> None:
    cls = REQUESTS[19]
    conf = [cls.CreatableTopic.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()]
    msg = cls(version=4, timeout_ms=5000, validate_only=False, topics=[
        cls.CreatableTopic(name=topic, num_partitions=1, replication_factor=1, assignments=[], configs=conf)
    ])
    resp = c.call(msg, 4)
    assert resp.topics[0].error_code == 0, resp


def make_partition(broker: BrokerProcess, configs: dict[str, str]) -> Iterator[Partition]:
    client = WireClient(broker.port, client_id="validation")
    topic = unique_topic("val")
    create(client, topic, configs)
    p = Partition(broker, client, topic, [b"seed-0", b"seed-1"])
    seed = p.produce(build_batch(p.values, keys=[b"a", b"b"]))
    assert seed.error_code == 0, seed
    try:
        yield p
        assert broker.running, broker.log_tail(40)
    finally:
        client.close()


@pytest.fixture
def plain(gregor: BrokerProcess) -> Iterator[Partition]:
    yield from make_partition(gregor, {})


def now_ms() -> int:
    return int(time.time() * 1000)


def stored_headers(p: Partition) -> list[BatchHeader]:
    data = (p.broker.partition_dir(p.topic) / SEGMENT).read_bytes()
    out, pos = [], 0
    while pos < len(data):
        header = BatchHeader.parse(data, pos)
        out.append(header)
        pos += header.size_in_bytes
    return out


# -- the structure of the records --------------------------------------------------------


CODECS = [Compression.NONE, Compression.LZ4, Compression.ZSTD]


@pytest.mark.parametrize("codec", CODECS)
def test_count_5_holding_4_records(plain: Partition, codec: Compression) -> None:
    plain.reject(batch([record(i) for i in range(4)], count=5, codec=codec), ErrorCode.INVALID_RECORD)


@pytest.mark.parametrize("codec", CODECS)
def test_count_3_holding_4_records(plain: Partition, codec: Compression) -> None:
    plain.reject(batch([record(i) for i in range(4)], count=3, codec=codec), ErrorCode.INVALID_RECORD)


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.GZIP])
def test_record_length_overrunning_the_batch(plain: Partition, codec: Compression) -> None:
    recs = [record(0), record(1), record(2, length_delta=7)]
    plain.reject(batch(recs, codec=codec), ErrorCode.INVALID_RECORD)


def test_record_length_leaving_bytes_inside_a_record(plain: Partition) -> None:
    recs = [record(0, extra=b"\x00\x00\x00"), record(1)]
    plain.reject(batch(recs), ErrorCode.INVALID_RECORD)


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.SNAPPY])
def test_trailing_bytes_after_the_records(plain: Partition, codec: Compression) -> None:
    raw = record(0) + record(1) + b"\x02\x00"
    plain.reject(batch(raw, count=2, codec=codec), ErrorCode.INVALID_RECORD)


def test_unterminated_varint(plain: Partition) -> None:
    plain.reject(batch([record(0), b"\x80\x80\x80"], count=2), ErrorCode.INVALID_RECORD)


@pytest.mark.parametrize("deltas", [[0, 0, 1], [1, 2, 3]])
def test_offset_deltas_not_0_to_n_minus_1(plain: Partition, deltas: list[int]) -> None:
    part = plain.reject(batch([record(d) for d in deltas]), ErrorCode.INVALID_RECORD)
    assert part.record_errors == []


@pytest.mark.parametrize("count", [-1, 4])
def test_bad_header_count(plain: Partition, count: int) -> None:
    recs = [record(0), record(1, headers=[(b"h", b"v")], header_count=count)]
    plain.reject(batch(recs), ErrorCode.INVALID_RECORD)


def test_undecodable_compressed_records(plain: Partition) -> None:
    data = batch(b"\x04\x22\x4d\x18 this is not lz4", count=1, codec=Compression.NONE)
    data = bytearray(data)
    struct.pack_into(">h", data, 21, int(Compression.LZ4))
    plain.reject(fix_crc(data), ErrorCode.CORRUPT_MESSAGE)


# -- compacted topics require keys ----------------------------------------------------------


def test_keyless_records_on_a_compacted_topic(gregor: BrokerProcess) -> None:
    for p in make_partition(gregor, {"cleanup.policy": "compact"}):
        recs = [record(0, key=b"a"), record(1, key=None), record(2, key=b"c"), record(3, key=None)]
        part = p.reject(batch(recs, codec=Compression.LZ4), ErrorCode.INVALID_RECORD)
        message = f"Compacted topic cannot accept message without key in topic partition {p.topic}-0"
        assert [(e.batch_index, e.batch_index_error_message) for e in part.record_errors] == [
            (1, message), (3, message)
        ]
        assert part.error_message == (
            "One or more records have been rejected due to 2 record errors in total, and only showing "
            f"the first three errors at most: [RecordError(batchIndex=1, message='{message}'), "
            f"RecordError(batchIndex=3, message='{message}')]"
        )


def test_hundred_keyless_records_store_nothing(gregor: BrokerProcess) -> None:
    for p in make_partition(gregor, {"cleanup.policy": "compact,delete"}):
        part = p.reject(build_batch([b"x%d" % i for i in range(100)]), ErrorCode.INVALID_RECORD)
        assert [e.batch_index for e in part.record_errors] == list(range(100))


# -- timestamps -----------------------------------------------------------------------------------


def test_timestamp_before_max_ms_topic_config(gregor: BrokerProcess) -> None:
    for p in make_partition(gregor, {"message.timestamp.before.max.ms": "60000"}):
        old = now_ms() - 3_600_000
        part = p.reject(build_batch([b"a", b"b"], keys=[b"1", b"2"], base_timestamp=old),
                        ErrorCode.INVALID_TIMESTAMP)
        assert part.error_message == "One or more records have been rejected due to invalid timestamp"
        assert [e.batch_index for e in part.record_errors] == [0, 1]
        first = part.record_errors[0].batch_index_error_message
        assert first.startswith(f"Timestamp {old} of message with offset 0 is out of range. "
                                "The timestamp should be within [")


def test_timestamp_after_max_ms_broker_config(plain: Partition) -> None:
    future = now_ms() + 2 * AFTER_MAX_MS
    part = plain.reject(build_batch([b"f"], base_timestamp=future), ErrorCode.INVALID_TIMESTAMP)
    assert [e.batch_index for e in part.record_errors] == [0]
    ok = plain.produce(build_batch([b"soon"], base_timestamp=now_ms() + AFTER_MAX_MS // 2))
    assert ok.error_code == 0, ok


def test_log_append_time_topic_stamps_the_batch(gregor: BrokerProcess) -> None:
    for p in make_partition(gregor, {"message.timestamp.type": "LogAppendTime"}):
        stamped = bytearray(build_batch([b"bad"]))
        struct.pack_into(">h", stamped, 21, TIMESTAMP_TYPE_MASK)
        p.reject(fix_crc(stamped), ErrorCode.INVALID_TIMESTAMP)  # producers may not set it
        before = now_ms()
        part = p.produce(build_batch([b"x", b"y"], base_timestamp=1000))
        after = now_ms()
        assert part.error_code == 0 and before <= part.log_append_time_ms <= after, part
        header = stored_headers(p)[-1]
        assert header.attributes & TIMESTAMP_TYPE_MASK and header.max_timestamp == part.log_append_time_ms
        got = read_to_eof(gregor.bootstrap, [(p.topic, 0)], "read_uncommitted", "validation", 20, p.topic)
        stamps = [m.timestamp() for _tp, m in got][-2:]
        assert stamps == [(2, part.log_append_time_ms)] * 2  # TIMESTAMP_LOG_APPEND_TIME, CRC checked
        lat = p.produce(build_batch([b"z"]), acks=1)
        assert lat.error_code == 0 and lat.log_append_time_ms >= part.log_append_time_ms


def test_create_time_topic_answers_no_append_time(plain: Partition) -> None:
    part = plain.produce(build_batch([b"c"]))
    assert part.error_code == 0 and part.log_append_time_ms == -1


# -- compression.type -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "codec"), [("zstd", Compression.ZSTD), ("uncompressed", Compression.NONE)]
)
def test_topic_compression_recompresses(gregor: BrokerProcess, target: str, codec: Compression) -> None:
    for p in make_partition(gregor, {"compression.type": target}):
        source = Compression.LZ4 if codec is Compression.NONE else Compression.NONE
        values = [b"value-%d" % i * 20 for i in range(50)]
        part = p.produce(build_batch(values, keys=[b"k%d" % i for i in range(50)], compression=int(source)))
        assert part.error_code == 0, part
        assert [h.attributes & COMPRESSION_MASK for h in stored_headers(p)] == [codec, codec]
        got = read_to_eof(gregor.bootstrap, [(p.topic, 0)], "read_uncommitted", "validation", 20, p.topic)
        assert [m.value() for _tp, m in got] == [*p.values, *values]
        assert [m.offset() for _tp, m in got] == list(range(52))


def test_librdkafka_keyless_produce_to_compacted_topic_fails(gregor: BrokerProcess) -> None:
    """A real client sees INVALID_RECORD in its delivery report; keyed records still go in."""
    from confluent_kafka import KafkaError, Producer

    reports: list[Any] = []

    def report(err: Any, _msg: Any) -> None:
        reports.append(err)

    for p in make_partition(gregor, {"cleanup.policy": "compact"}):
        producer = Producer({"bootstrap.servers": gregor.bootstrap, "acks": "all", "linger.ms": 0})
        producer.produce(p.topic, value=b"no key", partition=0, on_delivery=report)
        assert producer.flush(20) == 0
        assert [e.code() if e else None for e in reports] == [KafkaError.INVALID_RECORD]
        p.assert_unharmed()
        producer.produce(p.topic, key=b"k", value=b"keyed", partition=0, on_delivery=report)
        assert producer.flush(20) == 0 and reports[-1] is None
