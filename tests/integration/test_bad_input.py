"""Malformed input, byte by byte, against a real broker: every malformed input gets the
protocol's own answer, or a closed connection and a log line when the frame itself is
unreadable; never a crash, never a partial append.

Every case checks the answer (a per-partition error code, or a closed
connection for an unreadable frame) and then that nothing else was hurt:

- a *witness* connection opened before the bad one still gets ApiVersions and
  Metadata answers (the broker keeps serving others);
- the partition's log end offset (ListOffsets latest) is unchanged, and a
  valid produce afterwards gets exactly that offset (nothing partial was
  appended).

Expected codes follow Kafka (KafkaApis.handleProduceRequest +
ProduceRequest.validateRecords + LogValidator): a CRC mismatch or a magic the
broker cannot read is CORRUPT_MESSAGE (2); magic 0/1 in a v3+ produce, a
partition's records that are not exactly one whole batch, or null records are
INVALID_RECORD (87); a batch over max.message.bytes is MESSAGE_TOO_LARGE (10).
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from protocol.errors import ErrorCode
from protocol.messages import REQUESTS
from protocol.record_batch import ControlType, build_control_batch
from tests.integration.harness import (
    BrokerProcess,
    iter_batches,
    started_broker,
    unique_topic,
    wait_until,
)
from tests.integration.wire import (
    CRC_POS,
    HEADER_SIZE,
    MAGIC_POS,
    RECORDS_COUNT_POS,
    PeerClosed,
    WireClient,
    build_batch,
    create_topic,
    create_topics_request,
    encode_body,
    fix_crc,
    flip,
    frame,
    list_offsets_request,
    metadata_request,
    partition_errors,
    patch,
    produce_request,
    request_header,
)

SOCKET_REQUEST_MAX = 64 * 1024
MESSAGE_MAX = 4096
PARTITIONS = 2

CORRUPT = ErrorCode.CORRUPT_MESSAGE
INVALID_RECORD = ErrorCode.INVALID_RECORD
# Kafka answers a partial/short trailing batch as "no batch" (INVALID_RECORD);
# the brief asks for CORRUPT_MESSAGE. Either is the protocol's own answer.
TRUNCATED = {CORRUPT, INVALID_RECORD}


@pytest.fixture(scope="module")
def gregor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = {
        "socket.request.max.bytes": SOCKET_REQUEST_MAX,
        "message.max.bytes": MESSAGE_MAX,
        "auto.create.topics.enable": True,
    }
    with started_broker(tmp_path_factory.mktemp("bad-input"), overrides) as b:
        yield b


@dataclass
class Scene:
    broker: BrokerProcess
    topic: str
    witness: WireClient
    admin: WireClient
    leo: dict[int, int]

    def bad(self) -> WireClient:
        return WireClient(self.broker.port, timeout=10.0, client_id="bad-client")

    def check_unharmed(self) -> None:
        """Witness still served; no partition moved; a valid produce gets the next offset."""
        versions = self.witness.api_versions()
        assert versions.error_code == 0 and versions.api_keys
        md = self.witness.metadata([self.topic])
        assert [t.error_code for t in md.topics] == [0]
        for partition, before in self.leo.items():
            assert self.admin.log_end_offset(self.topic, partition) == before, (
                f"{self.topic}-{partition}: log end offset moved from {before}"
            )
        resp = self.witness.produce(self.topic, [(0, build_batch([b"after-1", b"after-2"]))])
        part = resp.responses[0].partition_responses[0]
        assert (part.error_code, part.base_offset) == (0, self.leo[0])
        assert self.admin.log_end_offset(self.topic, 0) == self.leo[0] + 2


@pytest.fixture
def scene(gregor: BrokerProcess) -> Iterator[Scene]:
    if not gregor.running:
        pytest.fail(f"the broker died during an earlier test\n{gregor.log_tail(60)}")
    topic = unique_topic("bad")
    witness = WireClient(gregor.port, client_id="witness")
    admin = WireClient(gregor.port, client_id="admin")
    created = admin.call(create_topics_request([topic], PARTITIONS), 4)
    assert created.topics[0].error_code == 0, created
    # Some data first, so "unchanged" is not just "still zero".
    resp = admin.produce(topic, [(0, build_batch([b"a", b"b", b"c"])), (1, build_batch([b"x"]))])
    assert partition_errors(resp) == {0: 0, 1: 0}, resp
    s = Scene(gregor, topic, witness, admin, {0: 3, 1: 1})
    try:
        yield s
        assert gregor.running, f"broker exited\n{gregor.log_tail(60)}"
        s.check_unharmed()
    finally:
        witness.close()
        admin.close()


def produce_one(scene: Scene, records: bytes | None, partition: int = 0, version: int = 7) -> int:
    """Produce `records` to one partition on a fresh connection; its error code."""
    with scene.bad() as c:
        resp = c.call(produce_request(scene.topic, [(partition, records)], version=version), version)
    errors = partition_errors(resp)
    assert list(errors) == [partition], resp
    return errors[partition]


def assert_closed(c: WireClient) -> None:
    assert c.closed_by_peer(timeout=5.0), "broker kept the connection open after an unreadable frame"


# -- record batches --------------------------------------------------------------


@pytest.mark.parametrize("version", [3, 7, 9, 11])
def test_corrupt_crc_in_records(scene: Scene, version: int) -> None:
    batch = flip(build_batch([b"hello", b"world"]), HEADER_SIZE + 3)
    assert produce_one(scene, batch, version=version) == CORRUPT


def test_corrupt_crc_field(scene: Scene) -> None:
    batch = flip(build_batch([b"hello"]), CRC_POS, 0x80)
    assert produce_one(scene, batch) == CORRUPT


def test_corrupt_attributes_are_covered_by_crc(scene: Scene) -> None:
    batch = flip(build_batch([b"hello"]), CRC_POS + 4 + 1, 0x08)  # timestamp-type bit
    assert produce_one(scene, batch) == CORRUPT


# Kafka: magic 0/1 → INVALID_RECORD ("only allowed to contain record batches
# with magic version 2"); a magic above 2 or negative fails earlier in
# ByteBufferLogInputStream ("Invalid magic found in record") → CORRUPT_MESSAGE.
# The brief allows INVALID_RECORD for any magic != 2, so both are accepted there.
@pytest.mark.parametrize(
    ("magic", "expected"),
    [(0, {INVALID_RECORD}), (1, {INVALID_RECORD}), (3, {CORRUPT, INVALID_RECORD}),
     (0xFF, {CORRUPT, INVALID_RECORD})],
)
def test_bad_magic(scene: Scene, magic: int, expected: set[ErrorCode]) -> None:
    batch = patch(build_batch([b"m"]), MAGIC_POS, bytes([magic]))
    assert produce_one(scene, batch) in expected


@pytest.mark.parametrize("cut", [1, 10, 40])
def test_truncated_batch(scene: Scene, cut: int) -> None:
    batch = build_batch([b"x" * 30, b"y" * 30])
    assert produce_one(scene, batch[:-cut]) in TRUNCATED


@pytest.mark.parametrize("keep", [0, 8, 12, 30, HEADER_SIZE - 1])
def test_records_shorter_than_a_batch_header(scene: Scene, keep: int) -> None:
    assert produce_one(scene, build_batch([b"z"])[:keep]) in TRUNCATED


def test_batch_length_field_too_small(scene: Scene) -> None:
    batch = build_batch([b"abc", b"def"])
    short = patch(batch, 8, struct.pack(">i", 20))  # < 49, the smallest legal batchLength
    assert produce_one(scene, short) in TRUNCATED


def test_record_count_beyond_records_present(scene: Scene) -> None:
    """Header and CRC consistent, but recordsCount claims 5 records where there are 2."""
    batch = fix_crc(patch(build_batch([b"r1", b"r2"]), RECORDS_COUNT_POS, struct.pack(">i", 5)))
    assert produce_one(scene, batch) in TRUNCATED


def test_two_batches_in_one_partition(scene: Scene) -> None:
    records = build_batch([b"first"]) + build_batch([b"second"])
    assert produce_one(scene, records) == INVALID_RECORD


def test_batch_then_garbage_in_one_partition(scene: Scene) -> None:
    records = build_batch([b"first"]) + b"\x00" * 20
    assert produce_one(scene, records) in TRUNCATED


def test_null_records(scene: Scene) -> None:
    assert produce_one(scene, None) in TRUNCATED


def test_batch_larger_than_max_message_bytes(scene: Scene) -> None:
    batch = build_batch([b"q" * 3000, b"r" * 3000])
    assert MESSAGE_MAX < len(batch) < SOCKET_REQUEST_MAX
    assert produce_one(scene, batch) == ErrorCode.MESSAGE_TOO_LARGE


def test_good_and_bad_partitions_in_one_request(scene: Scene) -> None:
    """Errors are per partition: the good partition is appended, the bad one is not."""
    good = build_batch([b"good"])
    bad = flip(build_batch([b"bad"]), HEADER_SIZE + 2)
    with scene.bad() as c:
        resp = c.produce(scene.topic, [(1, good), (0, bad)])
    errors = partition_errors(resp)
    assert errors == {1: 0, 0: CORRUPT}, resp
    scene.leo[1] += 1


@pytest.mark.parametrize("acks", [2, -2, 5])
def test_invalid_required_acks(scene: Scene, acks: int) -> None:
    with scene.bad() as c:
        resp = c.produce(scene.topic, [(0, build_batch([b"acks"]))], acks=acks)
    assert partition_errors(resp) == {0: ErrorCode.INVALID_REQUIRED_ACKS}


# -- unknown / invalid topics and partitions ----------------------------------------


def test_produce_unknown_topic(scene: Scene) -> None:
    with scene.bad() as c:
        resp = c.produce(unique_topic("nope"), [(0, build_batch([b"u"]))])
    assert partition_errors(resp) == {0: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


@pytest.mark.parametrize("partition", [PARTITIONS, 99, -1])
def test_produce_partition_out_of_range(scene: Scene, partition: int) -> None:
    error = produce_one(scene, build_batch([b"p"]), partition=partition)
    assert error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize("partition", [PARTITIONS, -1])
def test_list_offsets_partition_out_of_range(scene: Scene, partition: int) -> None:
    with scene.bad() as c:
        resp = c.call(list_offsets_request(scene.topic, [partition]), 1)
    assert resp.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_metadata_unknown_topic_without_auto_create(scene: Scene) -> None:
    name = unique_topic("ghost")
    with scene.bad() as c:
        resp = c.metadata([name], version=4, auto_create=False)
        assert [(t.name, t.error_code) for t in resp.topics] == [(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
        again = c.metadata([name], version=4, auto_create=False)
    assert again.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


INVALID_NAMES = ["bad name", "a/b", "", ".", "..", "t" * 250, "tópico", "x\x00y"]


@pytest.mark.parametrize("name", INVALID_NAMES, ids=repr)
def test_metadata_invalid_topic_name(scene: Scene, name: str) -> None:
    with scene.bad() as c:
        resp = c.metadata([name], version=4, auto_create=True)
    assert [t.error_code for t in resp.topics] == [ErrorCode.INVALID_TOPIC_EXCEPTION]


@pytest.mark.parametrize("name", INVALID_NAMES, ids=repr)
def test_create_topics_invalid_topic_name(scene: Scene, name: str) -> None:
    with scene.bad() as c:
        resp = c.call(create_topics_request([name]), 4)
    assert [t.error_code for t in resp.topics] == [ErrorCode.INVALID_TOPIC_EXCEPTION]


@pytest.mark.parametrize("name", ["bad name", "a/b", ""], ids=repr)
def test_produce_invalid_topic_name(scene: Scene, name: str) -> None:
    with scene.bad() as c:
        resp = c.produce(name, [(0, build_batch([b"n"]))])
    expected = {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_TOPIC_EXCEPTION}
    assert partition_errors(resp)[0] in expected


# -- unreadable frames: the connection is closed ------------------------------------


def test_negative_frame_length(scene: Scene) -> None:
    with scene.bad() as c:
        c.send_raw(struct.pack(">i", -1) + b"\x00" * 16)
        assert_closed(c)


def test_min_int_frame_length(scene: Scene) -> None:
    with scene.bad() as c:
        c.send_raw(struct.pack(">i", -(2**31)))
        assert_closed(c)


def test_oversize_frame_length(scene: Scene) -> None:
    with scene.bad() as c:
        c.send_raw(struct.pack(">i", SOCKET_REQUEST_MAX + 1))
        assert_closed(c)


def test_oversize_produce_request(scene: Scene) -> None:
    """A real produce over socket.request.max.bytes is refused before it is read."""
    big = build_batch([bytes(range(256)) * 300])
    assert len(big) > SOCKET_REQUEST_MAX
    with scene.bad() as c:
        try:
            c.call(produce_request(scene.topic, [(0, big)]), 7)
        except (PeerClosed, BrokenPipeError, ConnectionResetError):
            return
        pytest.fail("broker answered a request larger than socket.request.max.bytes")


def test_truncated_frame_then_close(scene: Scene) -> None:
    body = encode_body(produce_request(scene.topic, [(0, build_batch([b"half"]))]), 7)
    payload = request_header(0, 7, 1) + body
    with scene.bad() as c:
        c.send_raw(frame(payload)[: len(payload) // 2])
    # the socket is now closed mid-frame; check_unharmed runs in the fixture


def test_size_prefix_only_then_close(scene: Scene) -> None:
    with scene.bad() as c:
        c.send_raw(struct.pack(">i", 100) + b"\x00\x00")


def test_half_size_prefix_then_close(scene: Scene) -> None:
    with scene.bad() as c:
        c.send_raw(b"\x00\x00")


def test_connection_reset_mid_frame(scene: Scene) -> None:
    c = scene.bad()
    c.send_raw(struct.pack(">i", 1000) + b"\x00" * 10)
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST on close
    c.close()


def test_connection_reset_while_an_answer_waits(scene: Scene) -> None:
    """A client that resets its connection while a fetch long-polls: the answer, ready after
    the reset, is dropped without a traceback (uvloop refuses a write to a closed transport
    with a RuntimeError; a chaos campaign's broker logged one as an unhandled exception)."""
    cls = REQUESTS[1]
    fetch = cls(
        version=12, replica_id=-1, max_wait_ms=300, min_bytes=1, max_bytes=1 << 20,
        isolation_level=0, session_id=0, session_epoch=-1,
        topics=[cls.FetchTopic(topic=scene.topic, partitions=[cls.FetchTopic.FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=scene.leo[0], log_start_offset=-1,
            partition_max_bytes=1 << 20)])],
        forgotten_topics_data=[], rack_id="",
    )
    c = scene.bad()
    c.send_request(1, 12, encode_body(fetch, 12))
    time.sleep(0.1)  # the fetch waits in the broker for records that never come
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST on close
    c.close()
    time.sleep(0.6)  # past max_wait_ms: the broker has written (or dropped) its answer
    assert "Traceback" not in scene.broker.log_text()


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(b"", id="empty-frame"),
        pytest.param(b"\x00\x03\x00", id="3-bytes"),
        pytest.param(struct.pack(">hhi", 3, 1, 7), id="no-client-id"),
        pytest.param(struct.pack(">hhih", 3, 1, 7, 500) + b"short", id="client-id-past-end"),
        pytest.param(struct.pack(">hhih", 3, 1, 7, -7), id="client-id-length-minus-7"),
        pytest.param(struct.pack(">hhih", 3, 12, 7, -1) + b"\x01\x00\x09ab", id="tagged-field-past-end"),
    ],
)
def test_garbage_header(scene: Scene, payload: bytes) -> None:
    with scene.bad() as c:
        c.send_frame(payload)
        assert_closed(c)


@pytest.mark.parametrize(
    ("api_key", "version"),
    [
        pytest.param(9999, 0, id="key-9999"),
        pytest.param(-1, 0, id="key-minus-1"),
        pytest.param(67, 0, id="key-67-not-served"),
    ],
)
def test_unknown_api_key(scene: Scene, api_key: int, version: int) -> None:
    with scene.bad() as c:
        c.send_request(api_key, version, b"\x00" * 8)
        assert_closed(c)


@pytest.mark.parametrize(
    ("api_key", "version"),
    [
        pytest.param(0, 2, id="produce-v2-below-min"),
        pytest.param(0, 99, id="produce-v99"),
        pytest.param(3, 14, id="metadata-v14"),
        pytest.param(1, -1, id="fetch-v-1"),
    ],
)
def test_unsupported_api_version(scene: Scene, api_key: int, version: int) -> None:
    body = encode_body(metadata_request([scene.topic], version=1), 1)
    with scene.bad() as c:
        c.send_request(api_key, version, body)
        assert_closed(c)


@pytest.mark.parametrize("version", [5, 99, 32767])
def test_unsupported_api_versions_version(scene: Scene, version: int) -> None:
    """KIP-511: a v0 response with UNSUPPORTED_VERSION and the api list."""
    with scene.bad() as c:
        # Header v2 (tagged fields) plus a v3-style flexible body the broker cannot know.
        cid = c.next_correlation_id()
        c.send_frame(request_header(18, version, cid, flexible=True) + b"\x05wire\x021\x00")
        resp = c.recv_response(18, version, cid)
        assert resp.version == 0
        assert resp.error_code == ErrorCode.UNSUPPORTED_VERSION
        api = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        assert 18 in api and 0 in api and 3 in api, api
        # The connection stays usable: the client retries with a version it supports.
        low, high = api[18]
        again = c.api_versions(version=min(high, 3))
        assert again.error_code == 0


def test_bad_frame_after_pipelined_good_one(scene: Scene) -> None:
    """Responses already owed are sent in order before the connection closes."""
    good = request_header(3, 1, 41) + encode_body(metadata_request([scene.topic]), 1)
    with scene.bad() as c:
        c.send_raw(frame(good) + frame(b"\x00\x01"))
        first = c.recv_frame()
        assert struct.unpack_from(">i", first)[0] == 41
        assert_closed(c)


# -- lengths inside a body -------------------------------------------------------------


def _produce_v7_body(topic: str, records: bytes) -> bytes:
    return encode_body(produce_request(topic, [(0, records)]), 7)


def _answer_or_close(c: WireClient, api_key: int, version: int, body: bytes) -> object | None:
    """The decoded response, or None if the broker closed the connection."""
    cid = c.send_request(api_key, version, body)
    try:
        return c.recv_response(api_key, version, cid)
    except PeerClosed:
        return None


def test_negative_topic_name_length_in_produce(scene: Scene) -> None:
    body = _produce_v7_body(scene.topic, build_batch([b"neg"]))
    # transactional_id (null: ffff) · acks i16 · timeout i32 · topics count i32 · name i16 length
    name_len_pos = 2 + 2 + 4 + 4
    assert body[name_len_pos : name_len_pos + 2] == struct.pack(">h", len(scene.topic))
    bad = patch(body, name_len_pos, struct.pack(">h", -2))
    with scene.bad() as c:
        resp = _answer_or_close(c, 0, 7, bad)
    if resp is not None:
        assert set(partition_errors(resp).values()) <= {
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            ErrorCode.INVALID_REQUEST,
        }, resp


@pytest.mark.parametrize("count", [-2, -5, -(2**31)])
def test_negative_array_length_in_produce(scene: Scene, count: int) -> None:
    body = _produce_v7_body(scene.topic, build_batch([b"neg"]))
    bad = patch(body, 2 + 2 + 4, struct.pack(">i", count))
    with scene.bad() as c:
        resp = _answer_or_close(c, 0, 7, bad)
    if resp is not None:
        assert partition_errors(resp) == {}, resp


def test_negative_records_length_in_produce(scene: Scene) -> None:
    records = build_batch([b"neg"])
    body = _produce_v7_body(scene.topic, records)
    pos = len(body) - len(records) - 4
    assert body[pos : pos + 4] == struct.pack(">i", len(records))
    bad = patch(body, pos, struct.pack(">i", -3))
    with scene.bad() as c:
        resp = _answer_or_close(c, 0, 7, bad)
    if resp is not None:
        assert partition_errors(resp)[0] in TRUNCATED, resp


def test_records_length_past_end_of_frame(scene: Scene) -> None:
    """The records length says more than the frame holds.

    Kafka fails to parse the request ("Error reading bytes of size N, only M
    bytes available") and closes the connection. kafka-python's decoder clips
    the slice (`data[pos:pos+n]`) without complaint, so unless the broker
    checks that the body was consumed exactly, the whole batch is appended.
    """
    records = build_batch([b"long"])
    body = _produce_v7_body(scene.topic, records)
    pos = len(body) - len(records) - 4
    bad = patch(body, pos, struct.pack(">i", len(records) + 100))
    with scene.bad() as c:
        resp = _answer_or_close(c, 0, 7, bad)
    if resp is not None:
        assert partition_errors(resp)[0] in TRUNCATED, resp


def test_trailing_bytes_after_body(scene: Scene) -> None:
    body = _produce_v7_body(scene.topic, build_batch([b"trail"])) + b"\xde\xad"
    with scene.bad() as c:
        resp = _answer_or_close(c, 0, 7, body)
    # Gregor ignores bytes after the last field (librdkafka's Metadata v13
    # carries some); either way the batch must not be appended half-way, and
    # if it was answered and appended, account for it.
    if resp is not None and partition_errors(resp) == {0: 0}:
        scene.leo[0] += 1


def test_negative_string_length_in_metadata(scene: Scene) -> None:
    body = struct.pack(">i", 1) + struct.pack(">h", -9)  # Metadata v1: topics [name]
    with scene.bad() as c:
        resp = _answer_or_close(c, 3, 1, body)
    if resp is not None:
        assert all(t.error_code != 0 for t in resp.topics), resp  # type: ignore[attr-defined]


def test_flexible_produce_with_lying_compact_length(scene: Scene) -> None:
    """Produce v9 (flexible): a compact topic-count varint far larger than the frame."""
    body = encode_body(produce_request(scene.topic, [(0, build_batch([b"v9"]))], version=9), 9)
    # transactional_id compact null (00) · acks · timeout · topics compact count
    pos = 1 + 2 + 4
    assert body[pos] == 2
    bad = body[:pos] + b"\xff\xff\xff\xff\x0f" + body[pos + 1 :]
    with scene.bad() as c:
        c.send_request(0, 9, bad)
        assert_closed(c)


def test_many_bad_connections_do_not_leak(scene: Scene) -> None:
    for i in range(30):
        with scene.bad() as c:
            c.send_raw(struct.pack(">i", -1 - i))
    assert Path(scene.broker.log_path).exists()


def test_unreadable_frames_are_logged_in_one_line(scene: Scene) -> None:
    with scene.bad() as c:
        c.send_raw(struct.pack(">i", -42))
        assert_closed(c)
    log = scene.broker.log_text()
    assert "-42" in log, "no log line for the closed connection"
    tail = log[log.rindex("-42") - 300 :]
    assert "Traceback" not in tail, "expected client error logged with a stack trace"


# -- producer ids below -1 (Kafka: any id < 0 is "no producer id") ---------------------

INT64_MIN = -(2**63)
WRITE_TXN_MARKERS = 27


@pytest.mark.parametrize("pid", [-2, -77, INT64_MIN])
def test_produce_with_producer_id_below_minus_one(scene: Scene, pid: int) -> None:
    """Kafka's hasProducerId() is `producerId > -1`: a plain batch with id -2 is an
    ordinary non-idempotent batch (appended, no producer state); a transactional one
    has no producer id and is refused before anything is written."""
    plain = build_batch([b"p1", b"p2"], producer_id=pid, producer_epoch=3, base_sequence=0)
    assert produce_one(scene, plain) == 0
    scene.leo[0] += 2
    txn = build_batch([b"t"], producer_id=pid, producer_epoch=0, base_sequence=0, transactional=True)
    assert produce_one(scene, txn) == INVALID_RECORD
    with scene.bad() as c:  # the same batch again is not a "duplicate": no producer state
        resp = c.produce(scene.topic, [(0, plain)])
    assert partition_errors(resp) == {0: 0}
    scene.leo[0] += 2


def write_txn_markers_request(topic: str, partitions: list[int], pid: int, epoch: int = 0) -> Any:
    cls = REQUESTS[WRITE_TXN_MARKERS]
    marker = cls.WritableTxnMarker(
        producer_id=pid, producer_epoch=epoch, transaction_result=False, coordinator_epoch=0,
        topics=[cls.WritableTxnMarker.WritableTxnMarkerTopic(name=topic, partition_indexes=partitions)],
    )
    return cls(markers=[marker])


@pytest.mark.parametrize(("pid", "epoch"), [(-1, 0), (-2, 0), (INT64_MIN, 0), (5, -1), (-1, -1)])
@pytest.mark.parametrize("version", [0, 1])
def test_write_txn_markers_without_a_producer(scene: Scene, pid: int, epoch: int, version: int) -> None:
    """Validated as strictly as a client request: INVALID_REQUEST for every partition,
    nothing written, the connection stays open."""
    with scene.bad() as c:
        resp = c.call(write_txn_markers_request(scene.topic, [0, 1], pid, epoch), version)
        errors = [(p.partition_index, p.error_code) for m in resp.markers for t in m.topics
                  for p in t.partitions]
        assert errors == [(0, ErrorCode.INVALID_REQUEST), (1, ErrorCode.INVALID_REQUEST)], resp
        assert c.api_versions().error_code == 0
    assert "Traceback" not in scene.broker.log_text()


def _stored_batches(base: int) -> list[bytes]:
    """Batches an older version could have stored: ids below -1 on data and control
    batches, a control batch with no record. CRCs valid, offsets assigned from `base`."""
    now = int(time.time() * 1000)
    raw = [
        build_batch([b"s1", b"s2"], producer_id=-2, producer_epoch=0, base_sequence=0, transactional=True),
        build_batch([b"s3"], producer_id=INT64_MIN, producer_epoch=-7, base_sequence=5),
        build_control_batch(ControlType.ABORT, producer_id=-2, producer_epoch=0, coordinator_epoch=0,
                            timestamp=now),
        fix_crc(patch(build_control_batch(ControlType.COMMIT, producer_id=4242, producer_epoch=0,
                                          coordinator_epoch=0, timestamp=now), RECORDS_COUNT_POS,
                      struct.pack(">i", 0))),
    ]
    out = []
    for batch in raw:
        out.append(struct.pack(">q", base) + batch[8:])  # base offset is outside the CRC
        base += struct.unpack_from(">i", batch, 23)[0] + 1  # lastOffsetDelta
    return out


@pytest.mark.parametrize("clean", [False, True], ids=["kill-9", "sigterm"])
def test_broker_starts_over_stored_batches_without_producer_id(
    broker_factory: Any, clean: bool
) -> None:
    """Recovery never refuses to start because of what a stored batch holds."""
    b = broker_factory()
    topic = unique_topic("stored")
    with WireClient(b.port) as c:
        create_topic(c, topic)
        resp = c.produce(topic, [(0, build_batch([b"a", b"b"], producer_id=9, producer_epoch=0,
                                                  base_sequence=0))])
        assert partition_errors(resp) == {0: 0}
    if clean:
        b.stop()
    else:
        b.kill9()
    seg = sorted(b.partition_dir(topic).glob("*.log"))[-1]
    stored = _stored_batches(2)
    with open(seg, "ab") as f:
        f.write(b"".join(stored))
    end = 2 + 2 + 1 + 1 + 1
    b.start()
    with WireClient(b.port) as c:
        assert c.log_end_offset(topic) == end
        resp = c.produce(topic, [(0, build_batch([b"c"], producer_id=9, producer_epoch=0, base_sequence=2))])
        assert [(p.error_code, p.base_offset) for t in resp.responses for p in t.partition_responses] == [
            (0, end)
        ]
    b.kill9()
    b.start()
    with WireClient(b.port) as c:
        assert c.log_end_offset(topic) == end + 1
    assert "Traceback" not in b.log_text()


def test_markers_refused_then_kill9(broker_factory: Any) -> None:
    """A refused marker wrote nothing: after kill -9 the log is what was acknowledged."""
    b = broker_factory()
    topic = unique_topic("marker")
    with WireClient(b.port) as c:
        create_topic(c, topic)
        assert partition_errors(c.produce(topic, [(0, build_batch([b"x"]))])) == {0: 0}
        for pid in (-1, -2, INT64_MIN):
            resp = c.call(write_txn_markers_request(topic, [0], pid), 1)
            assert resp.markers[0].topics[0].partitions[0].error_code == ErrorCode.INVALID_REQUEST
        assert c.log_end_offset(topic) == 1
    size = sum(p.stat().st_size for p in b.partition_dir(topic).glob("*.log"))
    b.kill9()
    b.start()
    with WireClient(b.port) as c:
        assert c.log_end_offset(topic) == 1
    assert sum(p.stat().st_size for p in b.partition_dir(topic).glob("*.log")) == size
    assert "Traceback" not in b.log_text()


# -- nulls and lengths the schema forbids: refused at parse time, nothing runs ------------


def _create_topics_v4_body(good: str, bad: str) -> bytes:
    """CreateTopics v4 with a valid topic, then one whose (non-nullable) configs are null."""
    def topic(name: str, configs: bytes) -> bytes:
        raw = name.encode()
        return struct.pack(">h", len(raw)) + raw + struct.pack(">ihi", 1, 1, 0) + configs

    topics = topic(good, struct.pack(">i", 0)) + topic(bad, struct.pack(">i", -1))
    return struct.pack(">i", 2) + topics + struct.pack(">i?", 5000, False)


def test_null_in_non_nullable_field_runs_nothing(scene: Scene) -> None:
    """Kafka fails to parse the request ("non-nullable field configs was serialized as
    null"), closes the connection and creates neither topic."""
    good, bad = unique_topic("good"), unique_topic("nullcfg")
    with scene.bad() as c:
        c.send_request(19, 4, _create_topics_v4_body(good, bad))
        assert_closed(c)
    md = scene.witness.metadata([good, bad], version=4, auto_create=False)
    assert [t.error_code for t in md.topics] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * 2
    log = scene.broker.log_text()
    assert "non-nullable field configs was serialized as null" in log
    assert "Traceback" not in log


@pytest.mark.parametrize("count", [2**31 - 1, 1 << 20])
def test_huge_array_count_is_refused_before_allocation(scene: Scene, count: int) -> None:
    body = _produce_v7_body(scene.topic, build_batch([b"huge"]))
    bad = patch(body, 2 + 2 + 4, struct.pack(">i", count))
    with scene.bad() as c:
        c.send_request(0, 7, bad)
        assert_closed(c)
    assert "tried to allocate a collection of size" in scene.broker.log_text()


@pytest.mark.parametrize(("name", "version"), [("", "1.0"), ("-bad", "1"), ("ok", "x y"), ("ok", "1.")])
def test_api_versions_with_invalid_software_name(scene: Scene, name: str, version: str) -> None:
    """Kafka's ApiVersionsRequest.isValid (v3+): answered with INVALID_REQUEST, kept open."""
    with scene.bad() as c:
        msg = REQUESTS[18](version=3, client_software_name=name, client_software_version=version)
        cid = c.send_request(18, 3, encode_body(msg, 3))
        payload = c.recv_frame()  # sent at v3, as Kafka does (kafka-python reads errors as v0)
        assert struct.unpack_from(">i", payload) == (cid,)
        assert struct.unpack_from(">hb", payload, 4) == (ErrorCode.INVALID_REQUEST, 1)  # no api keys
        assert c.api_versions(version=3).error_code == 0


# -- requests pipelined behind a failed one -------------------------------------------------

DESCRIBE_GROUPS = 15
LIST_GROUPS = 16


@pytest.fixture
def failing_broker(broker_factory: Any, monkeypatch: pytest.MonkeyPatch) -> BrokerProcess:
    """A broker whose DescribeGroups handler raises (a stand-in for a handler bug)."""
    monkeypatch.setenv("GREGOR_FAIL_POINTS", f"request-{DESCRIBE_GROUPS}")
    b: BrokerProcess = broker_factory()
    return b


def _frames(topic: str, *kinds: str) -> tuple[bytes, list[int]]:
    """Frames for `kinds` to pipeline in one send, and their correlation ids."""
    out, ids = b"", []
    for cid, kind in enumerate(kinds, start=100):
        if kind == "metadata":
            payload = request_header(3, 1, cid) + encode_body(metadata_request([topic]), 1)
        elif kind == "describe-groups":
            body = encode_body(REQUESTS[DESCRIBE_GROUPS](groups=["g"]), 0)
            payload = request_header(DESCRIBE_GROUPS, 0, cid) + body
        elif kind == "list-groups":
            payload = request_header(LIST_GROUPS, 0, cid) + encode_body(REQUESTS[LIST_GROUPS](), 0)
        elif kind == "undecodable":
            payload = request_header(3, 1, cid) + struct.pack(">ih", 1, -1)  # null topic name
        else:
            acks = 0 if kind == "produce-acks0" else 1
            msg = produce_request(topic, [(0, build_batch([kind.encode()]))], acks=acks)
            payload = request_header(0, 7, cid) + encode_body(msg, 7)
        out += frame(payload)
        ids.append(cid)
    return out, ids


@pytest.mark.parametrize("failing", ["describe-groups", "undecodable"])
def test_nothing_runs_behind_a_failed_request(failing_broker: BrokerProcess, failing: str) -> None:
    """Kafka closes at the bad request and runs nothing after it: the Metadata before
    it is answered, the produces behind it (acks=1 and acks=0) are never appended."""
    topic = unique_topic("behind")
    with WireClient(failing_broker.port) as c:
        create_topic(c, topic)
        data, ids = _frames(topic, "metadata", failing, "produce", "produce-acks0", "produce")
        c.send_raw(data)
        first = c.recv_frame()
        assert struct.unpack_from(">i", first) == (ids[0],)
        assert_closed(c)
    with WireClient(failing_broker.port) as c:
        assert c.log_end_offset(topic) == 0
        assert partition_errors(c.produce(topic, [(0, build_batch([b"later"]))])) == {0: 0}
        assert c.log_end_offset(topic) == 1


def test_pipelined_requests_are_all_answered_in_order(failing_broker: BrokerProcess) -> None:
    topic = unique_topic("order")
    with WireClient(failing_broker.port) as c:
        create_topic(c, topic)
        data, ids = _frames(topic, "list-groups", "produce", "metadata", "produce-acks0", "produce")
        c.send_raw(data)
        answered = [struct.unpack_from(">i", c.recv_frame())[0] for _ in range(4)]
        assert answered == [ids[0], ids[1], ids[2], ids[4]]
        assert c.log_end_offset(topic) == 3


@pytest.mark.parametrize("pid", [-1, -2, INT64_MIN])
def test_txn_offset_commit_without_a_producer(scene: Scene, pid: int) -> None:
    """A transactional offset commit needs a producer id: the coordinator knows no such producer
    (INVALID_PRODUCER_ID_MAPPING, as Kafka 4.3 answers), nothing stored."""
    cls = REQUESTS[28]
    topic = cls.TxnOffsetCommitRequestTopic
    part = topic.TxnOffsetCommitRequestPartition(
        partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata=""
    )
    msg = cls(transactional_id="t-none", group_id=unique_topic("g"), producer_id=pid, producer_epoch=0,
              generation_id=-1, member_id="", group_instance_id=None,
              topics=[topic(name=scene.topic, partitions=[part])])
    with scene.bad() as c:
        wait_until(lambda: _transaction_coordinator_ready(c, "t-none"), timeout=30, msg="its coordinator")
        resp = c.call(msg, 3)
    errors = [p.error_code for t in resp.topics for p in t.partitions]
    assert errors == [ErrorCode.INVALID_PRODUCER_ID_MAPPING]


def _transaction_coordinator_ready(c: WireClient, transactional_id: str) -> bool:
    answer = c.call(REQUESTS[10](key_type=1, coordinator_keys=[transactional_id]), 4)
    return bool(answer.coordinators[0].error_code == ErrorCode.NONE)


def test_acks0_produce_error_closes_the_connection(scene: Scene) -> None:
    """Kafka closes the connection when an acks=0 produce fails: the producer has no
    other way to learn of it. Nothing pipelined behind it runs."""
    bad = flip(build_batch([b"acks0"]), HEADER_SIZE + 2)
    produce = request_header(0, 7, 1) + encode_body(produce_request(scene.topic, [(0, bad)], acks=0), 7)
    good = request_header(0, 7, 2) + encode_body(produce_request(scene.topic, [(1, build_batch([b"g"]))]), 7)
    with scene.bad() as c:
        c.send_raw(frame(produce) + frame(good))
        assert_closed(c)
    assert "acks=0 produce failed" in scene.broker.log_text()


def _unreadable_internal_batches() -> list[bytes]:
    """CRC-valid batches no coordinator can read: keys and values cut short, a record
    count above the records present, a control batch of an unknown marker type."""
    two = build_batch([b"v1", b"v2"], keys=[b"\x00\x01", b"\x00\x01"])
    control = build_batch([b"\x00\x00\x00\x00\x00\x00"], keys=[b"\x00\x00\x00\x07"])
    return [
        build_batch([b"garbage-value"], keys=[b"\x00\x01garbage"]),
        build_batch([None], keys=[b"\x00"]),
        build_batch([b"\x00\x01" + b"\x00" * 4], keys=[b"\x00\x00\x00\x01t"]),
        build_batch([b"\x00\x09"], keys=[b"\x00\x02\x00\x01g"]),
        fix_crc(patch(two, RECORDS_COUNT_POS, struct.pack(">i", 3))),
        fix_crc(patch(control, 21, b"\x00\x30")),  # transactional + control
    ]


def test_broker_starts_over_unreadable_internal_records(broker_factory: Any) -> None:
    """The coordinators skip (with one line each) what they cannot read at load; they
    never keep the broker from starting."""
    b = broker_factory()
    with WireClient(b.port) as c:
        for key, key_type in (("g", 0), ("t", 1)):
            c.call(REQUESTS[10](key=key, key_type=key_type), 1)
    b.kill9()
    for topic in ("__consumer_offsets", "__transaction_state"):
        for part_dir in sorted(b.data_dir.glob(f"{topic}-*")):
            seg = sorted(part_dir.glob("*.log"))[-1]
            end = max((base + delta + 1 for _p, base, delta in iter_batches(seg)), default=0)
            out = b""
            for batch in _unreadable_internal_batches():
                out += struct.pack(">q", end) + batch[8:]
                end += struct.unpack_from(">i", batch, 23)[0] + 1
            with open(seg, "ab") as f:
                f.write(out)
    b.start()
    with WireClient(b.port) as c:
        for key, key_type in (("g", 0), ("t", 1)):
            assert c.call(REQUESTS[10](key=key, key_type=key_type), 1).error_code == 0
    text = b.log_text()
    assert "skipping unreadable batch" in text and "skipping unreadable record" in text
    assert "Traceback" not in text
