"""A tiny blocking raw-socket Kafka client for byte-level tests.

It builds frames from header fields plus body bytes (or from a kafka-python
message encoded at a chosen version), reads one framed response and decodes
it. Nothing is hidden: callers can send any bytes, half a frame, or close
mid-way, and ask whether the broker closed the connection.

    with WireClient(broker.port) as c:
        resp = c.call(REQUESTS[3](version=1, topics=None), version=1)
        c.send_frame(b"\\xff\\xff\\xff\\xff")  # anything at all
        assert c.closed_by_peer()
"""

from __future__ import annotations

import socket
import struct
import time
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import crc32c

with warnings.catch_warnings():  # kafka-python schema loading warns at import time
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder

    from protocol.headers import header_is_flexible
    from protocol.messages import REQUESTS, RESPONSES, response_is_flexible

API_VERSIONS = 18
HEADER_I16 = struct.Struct(">hhi")


class PeerClosed(ConnectionError):
    """The broker closed the connection (EOF or reset) before a full frame arrived."""


# -- request building ---------------------------------------------------------


def request_header(
    api_key: int,
    version: int,
    correlation_id: int,
    client_id: str | None = "gregor-wire",
    flexible: bool | None = None,
) -> bytes:
    """Request header v1 (v2 with an empty tagged-field section when flexible)."""
    if flexible is None:
        flexible = api_key in REQUESTS and header_is_flexible(api_key, version)
    head = HEADER_I16.pack(api_key, version, correlation_id)
    if client_id is None:
        head += struct.pack(">h", -1)
    else:
        raw = client_id.encode()
        head += struct.pack(">h", len(raw)) + raw
    return head + (b"\x00" if flexible else b"")


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def encode_body(msg: Any, version: int) -> bytes:
    return bytes(msg.encode(version=version))


# -- record batches -------------------------------------------------------------


def build_batch(
    values: Sequence[bytes | None] = (b"v",),
    *,
    keys: Sequence[bytes | None] | None = None,
    base_timestamp: int | None = None,
    compression: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
) -> bytes:
    """A valid magic-v2 batch with base offset 0, built by kafka-python."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=1 << 30,
    )
    ts = int(time.time() * 1000) if base_timestamp is None else base_timestamp
    keys = keys if keys is not None else [None] * len(values)
    for i, (key, value) in enumerate(zip(keys, values, strict=True)):
        builder.append(i, timestamp=ts + i, key=key, value=value, headers=[])
    return bytes(builder.build())


# Field positions inside a magic-v2 batch's 61-byte big-endian header: baseOffset i64,
# batchLength i32, partitionLeaderEpoch i32, magic i8, crc u32, attributes i16, ...,
# recordsCount i32 (Kafka's DefaultRecordBatch).
BATCH_LENGTH_POS = 8
MAGIC_POS = 16
CRC_POS = 17
ATTRIBUTES_POS = 21
RECORDS_COUNT_POS = 57
HEADER_SIZE = 61


def fix_crc(batch: bytes | bytearray) -> bytes:
    """Recompute the CRC-32C (attributes to end) after a deliberate mutation."""
    out = bytearray(batch)
    struct.pack_into(">I", out, CRC_POS, crc32c.crc32c(bytes(out[ATTRIBUTES_POS:])))
    return bytes(out)


def patch(data: bytes, pos: int, new: bytes) -> bytes:
    """`data` with `new` written over the bytes at `pos`."""
    assert 0 <= pos and pos + len(new) <= len(data), (pos, len(new), len(data))
    return data[:pos] + new + data[pos + len(new) :]


def flip(data: bytes, pos: int, mask: int = 0x01) -> bytes:
    return patch(data, pos, bytes([data[pos] ^ mask]))


# -- message helpers ------------------------------------------------------------


def produce_request(
    topic: str,
    partitions: Iterable[tuple[int, bytes | None]],
    *,
    acks: int = 1,
    version: int = 7,
    timeout_ms: int = 5000,
    transactional_id: str | None = None,
) -> Any:
    cls = REQUESTS[0]
    data = cls.TopicProduceData.PartitionProduceData
    return cls(
        version=version,
        transactional_id=transactional_id,
        acks=acks,
        timeout_ms=timeout_ms,
        topic_data=[
            cls.TopicProduceData(name=topic, partition_data=[data(index=i, records=r) for i, r in partitions])
        ],
    )


def list_offsets_request(topic: str, partitions: Iterable[int], timestamp: int = -1, version: int = 1) -> Any:
    cls = REQUESTS[2]
    part = cls.ListOffsetsTopic.ListOffsetsPartition
    return cls(
        version=version,
        replica_id=-1,
        topics=[
            cls.ListOffsetsTopic(
                name=topic, partitions=[part(partition_index=p, timestamp=timestamp) for p in partitions]
            )
        ],
    )


def metadata_request(topics: list[str] | None, version: int = 1, auto_create: bool = False) -> Any:
    cls = REQUESTS[3]
    ts = None if topics is None else [cls.MetadataRequestTopic(name=t) for t in topics]
    return cls(version=version, topics=ts, allow_auto_topic_creation=auto_create)


def create_topics_request(names: list[str], partitions: int = 1, version: int = 4) -> Any:
    cls = REQUESTS[19]
    return cls(
        version=version,
        topics=[
            cls.CreatableTopic(
                name=n, num_partitions=partitions, replication_factor=1, assignments=[], configs=[]
            )
            for n in names
        ],
        timeout_ms=5000,
        validate_only=False,
    )


def create_topic(c: WireClient, topic: str, partitions: int = 1) -> None:
    """CreateTopics v4 for one topic, which must succeed."""
    resp = c.call(create_topics_request([topic], partitions), 4)
    assert resp.topics[0].error_code == 0, resp


def partition_errors(produce_response: Any) -> dict[int, int]:
    return {
        p.index: p.error_code for t in produce_response.responses for p in t.partition_responses
    }


# -- the client -------------------------------------------------------------------


class WireClient:
    def __init__(
        self, port: int, host: str = "127.0.0.1", timeout: float = 10.0, client_id: str = "gregor-wire",
        source: str | None = None,
    ) -> None:
        """`source`: the local address to connect from (e.g. 127.0.0.2, another loopback address)."""
        at = (source, 0) if source is not None else None
        self.sock = socket.create_connection((host, port), timeout=timeout, source_address=at)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = client_id
        self._next_id = 1

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    # -- raw bytes ------------------------------------------------------------------

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_frame(self, payload: bytes) -> None:
        self.sock.sendall(frame(payload))

    def next_correlation_id(self) -> int:
        cid, self._next_id = self._next_id, self._next_id + 1
        return cid

    def send_request(
        self, api_key: int, version: int, body: bytes, correlation_id: int | None = None
    ) -> int:
        cid = self.next_correlation_id() if correlation_id is None else correlation_id
        self.send_frame(request_header(api_key, version, cid, self.client_id) + body)
        return cid

    def recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except ConnectionResetError as exc:
                raise PeerClosed("connection reset by broker") from exc
            if not chunk:
                raise PeerClosed(f"EOF after {len(buf)} of {n} bytes")
            buf += chunk
        return bytes(buf)

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self.recv_exact(4))
        assert 0 <= size < 1 << 30, f"broker sent frame size {size}"
        return self.recv_exact(size)

    # -- typed requests ---------------------------------------------------------------

    def recv_response(self, api_key: int, version: int, correlation_id: int) -> Any:
        payload = self.recv_frame()
        (got,) = struct.unpack_from(">i", payload, 0)
        assert got == correlation_id, f"correlation id {got}, expected {correlation_id}"
        pos = 4
        if api_key != API_VERSIONS and response_is_flexible(api_key, version):
            assert payload[pos] == 0, f"response header has tagged fields: {payload[pos:pos + 8].hex()}"
            pos += 1
        return RESPONSES[api_key].decode(payload[pos:], version=version)

    def raw_call(self, api_key: int, version: int, body: bytes) -> Any:
        cid = self.send_request(api_key, version, body)
        return self.recv_response(api_key, version, cid)

    def call(self, msg: Any, version: int) -> Any:
        return self.raw_call(msg.API_KEY, version, encode_body(msg, version))

    # -- conveniences -------------------------------------------------------------------

    def api_versions(self, version: int = 3) -> Any:
        body = encode_body(REQUESTS[API_VERSIONS](version=version, client_software_name="wire",
                                                  client_software_version="1"), version)
        return self.raw_call(API_VERSIONS, version, body)

    def metadata(self, topics: list[str] | None, version: int = 1, auto_create: bool = False) -> Any:
        return self.call(metadata_request(topics, version, auto_create), version)

    def produce(self, topic: str, partitions: Iterable[tuple[int, bytes | None]], **kw: Any) -> Any:
        msg = produce_request(topic, partitions, **kw)
        return self.call(msg, msg.version)

    def log_end_offset(self, topic: str, partition: int = 0) -> int:
        resp = self.call(list_offsets_request(topic, [partition]), 1)
        p = resp.topics[0].partitions[0]
        assert p.error_code == 0, f"ListOffsets {topic}-{partition}: error {p.error_code}"
        return int(p.offset)

    def closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True if the broker closes the connection within `timeout` (any data read is dropped)."""
        self.sock.settimeout(timeout)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
        return False
