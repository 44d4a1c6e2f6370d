"""Sans-I/O codecs for ``__transaction_state`` records (Kafka's TransactionLogKey/Value).

Key: version i16 (0) + TransactionalId (non-flexible string).
Value (version-prefixed, i16):
  v0: ProducerId i64, ProducerEpoch i16, TransactionTimeoutMs i32, TransactionStatus i8,
      TransactionPartitions nullable [Topic string, PartitionIds [i32]],
      TransactionLastUpdateTimestampMs i64, TransactionStartTimestampMs i64.
  v1: the same fields in flexible encoding (compact strings/arrays, a tag buffer after each
      partitions entry) plus top-level tagged fields PreviousProducerId (tag 0, i64, default -1),
      NextProducerId (tag 1, i64, default -1) and ClientTransactionVersion (tag 2, i16, default 0).
      A tagged field is written only when it differs from its default.
A null value is a tombstone: the transactional id was expired.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

KEY_VERSION = 0
VALUE_VERSIONS = (0, 1)

_TAG_PREVIOUS_PRODUCER_ID = 0
_TAG_NEXT_PRODUCER_ID = 1
_TAG_CLIENT_TRANSACTION_VERSION = 2

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

PartitionsField = tuple[tuple[str, tuple[int, ...]], ...]


class TransactionLogDecodeError(ValueError):
    """The bytes are not a valid transaction log key or value."""


class UnknownRecordVersion(TransactionLogDecodeError):
    """A version this code does not know; Kafka skips such records when loading."""

    def __init__(self, what: str, version: int) -> None:
        super().__init__(f"unknown {what} version {version}")
        self.version = version


@dataclass(frozen=True, slots=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: int
    partitions: PartitionsField | None
    last_update_ms: int
    start_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0


# ---------------------------------------------------------------- encoding


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _string(s: str, flexible: bool) -> bytes:
    data = s.encode("utf-8")
    if flexible:
        return _uvarint(len(data) + 1) + data
    if len(data) > 0x7FFF:
        raise ValueError("string longer than 32767 bytes")
    return _I16.pack(len(data)) + data


def _array_len(n: int | None, flexible: bool) -> bytes:
    if flexible:
        return _uvarint(0 if n is None else n + 1)
    return _I32.pack(-1 if n is None else n)


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(KEY_VERSION) + _string(transactional_id, flexible=False)


def _encode_partitions(partitions: PartitionsField | None, flexible: bool) -> bytes:
    out = bytearray(_array_len(None if partitions is None else len(partitions), flexible))
    for topic, ids in partitions or ():
        out += _string(topic, flexible)
        out += _array_len(len(ids), flexible)
        for pid in ids:
            out += _I32.pack(pid)
        if flexible:
            out += b"\x00"
    return bytes(out)


def _tagged_fields(value: TxnLogValue) -> bytes:
    fields: list[tuple[int, bytes]] = []
    if value.previous_producer_id != -1:
        fields.append((_TAG_PREVIOUS_PRODUCER_ID, _I64.pack(value.previous_producer_id)))
    if value.next_producer_id != -1:
        fields.append((_TAG_NEXT_PRODUCER_ID, _I64.pack(value.next_producer_id)))
    if value.client_transaction_version != 0:
        fields.append((_TAG_CLIENT_TRANSACTION_VERSION, _I16.pack(value.client_transaction_version)))
    out = bytearray(_uvarint(len(fields)))
    for tag, data in fields:
        out += _uvarint(tag) + _uvarint(len(data)) + data
    return bytes(out)


def encode_value(value: TxnLogValue, version: int = 1) -> bytes:
    """Version 0 cannot carry the tagged fields; they are dropped, as Kafka does."""
    if version not in VALUE_VERSIONS:
        raise ValueError(f"unsupported transaction log value version {version}")
    flexible = version >= 1
    out = bytearray(_I16.pack(version))
    out += _I64.pack(value.producer_id)
    out += _I16.pack(value.producer_epoch)
    out += _I32.pack(value.timeout_ms)
    out += _I8.pack(value.status)
    out += _encode_partitions(value.partitions, flexible)
    out += _I64.pack(value.last_update_ms)
    out += _I64.pack(value.start_ms)
    if flexible:
        out += _tagged_fields(value)
    return bytes(out)


# ---------------------------------------------------------------- decoding


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes | memoryview) -> None:
        self.buf = memoryview(buf)
        self.pos = 0

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.buf):
            raise TransactionLogDecodeError(f"truncated at byte {self.pos} (need {n})")
        chunk = self.buf[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, s: struct.Struct) -> int:
        value: int = s.unpack(self.take(s.size))[0]
        return value

    def uvarint(self) -> int:
        result = shift = 0
        while True:
            byte = self.take(1)[0]
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7
            if shift > 28:
                raise TransactionLogDecodeError("varint too long")

    def string(self, flexible: bool) -> str:
        n = self.uvarint() - 1 if flexible else self.unpack(_I16)
        if n < 0:
            raise TransactionLogDecodeError("null string where a string is required")
        try:
            return bytes(self.take(n)).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TransactionLogDecodeError(f"bad utf-8: {exc}") from exc

    def array_len(self, flexible: bool) -> int | None:
        n = self.uvarint() - 1 if flexible else self.unpack(_I32)
        if n < -1:
            raise TransactionLogDecodeError(f"bad array length {n}")
        if n > len(self.buf) - self.pos:
            raise TransactionLogDecodeError(f"array length {n} exceeds remaining bytes")
        return None if n == -1 else n

    def skip_tagged(self) -> dict[int, memoryview]:
        fields: dict[int, memoryview] = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            fields[tag] = self.take(self.uvarint())
        return fields


def decode_key(data: bytes | memoryview) -> str:
    reader = _Reader(data)
    version = reader.unpack(_I16)
    if version != KEY_VERSION:
        raise UnknownRecordVersion("transaction log key", version)
    return reader.string(flexible=False)


def _decode_partitions(reader: _Reader, flexible: bool) -> PartitionsField | None:
    count = reader.array_len(flexible)
    if count is None:
        return None
    entries: list[tuple[str, tuple[int, ...]]] = []
    for _ in range(count):
        topic = reader.string(flexible)
        n = reader.array_len(flexible)
        if n is None:
            raise TransactionLogDecodeError("null PartitionIds")
        ids = tuple(reader.unpack(_I32) for _ in range(n))
        if flexible:
            reader.skip_tagged()
        entries.append((topic, ids))
    return tuple(entries)


def _tagged_int(fields: dict[int, memoryview], tag: int, s: struct.Struct, default: int) -> int:
    raw = fields.get(tag)
    if raw is None:
        return default
    if len(raw) != s.size:
        raise TransactionLogDecodeError(f"tagged field {tag} has {len(raw)} bytes")
    value: int = s.unpack(raw)[0]
    return value


def decode_value(data: bytes | memoryview) -> TxnLogValue:
    reader = _Reader(data)
    version = reader.unpack(_I16)
    if version not in VALUE_VERSIONS:
        raise UnknownRecordVersion("transaction log value", version)
    flexible = version >= 1
    producer_id = reader.unpack(_I64)
    producer_epoch = reader.unpack(_I16)
    timeout_ms = reader.unpack(_I32)
    status = reader.unpack(_I8)
    partitions = _decode_partitions(reader, flexible)
    last_update_ms = reader.unpack(_I64)
    start_ms = reader.unpack(_I64)
    tagged = reader.skip_tagged() if flexible else {}
    return TxnLogValue(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        timeout_ms=timeout_ms,
        status=status,
        partitions=partitions,
        last_update_ms=last_update_ms,
        start_ms=start_ms,
        previous_producer_id=_tagged_int(tagged, _TAG_PREVIOUS_PRODUCER_ID, _I64, -1),
        next_producer_id=_tagged_int(tagged, _TAG_NEXT_PRODUCER_ID, _I64, -1),
        client_transaction_version=_tagged_int(tagged, _TAG_CLIENT_TRANSACTION_VERSION, _I16, 0),
    )
