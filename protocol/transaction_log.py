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

from protocol.primitives import (
    EMPTY_TAGGED_FIELDS,
    I8,
    I16,
    I32,
    I64,
    Reader,
    encode_array_len,
    encode_string,
    encode_tagged_fields,
)

KEY_VERSION = 0
VALUE_VERSIONS = (0, 1)

_TAG_PREVIOUS_PRODUCER_ID = 0
_TAG_NEXT_PRODUCER_ID = 1
_TAG_CLIENT_TRANSACTION_VERSION = 2

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


def encode_key(transactional_id: str) -> bytes:
    return I16.pack(KEY_VERSION) + encode_string(transactional_id, flexible=False)


def _encode_partitions(partitions: PartitionsField | None, flexible: bool) -> bytes:
    out = bytearray(encode_array_len(None if partitions is None else len(partitions), flexible))
    for topic, ids in partitions or ():
        out += encode_string(topic, flexible)
        out += encode_array_len(len(ids), flexible)
        for pid in ids:
            out += I32.pack(pid)
        if flexible:
            out += EMPTY_TAGGED_FIELDS
    return bytes(out)


def _tagged_fields(value: TxnLogValue) -> bytes:
    fields: list[tuple[int, bytes]] = []
    if value.previous_producer_id != -1:
        fields.append((_TAG_PREVIOUS_PRODUCER_ID, I64.pack(value.previous_producer_id)))
    if value.next_producer_id != -1:
        fields.append((_TAG_NEXT_PRODUCER_ID, I64.pack(value.next_producer_id)))
    if value.client_transaction_version != 0:
        fields.append((_TAG_CLIENT_TRANSACTION_VERSION, I16.pack(value.client_transaction_version)))
    return encode_tagged_fields(fields)


def encode_value(value: TxnLogValue, version: int = 1) -> bytes:
    """Version 0 cannot carry the tagged fields; they are dropped, as Kafka does."""
    if version not in VALUE_VERSIONS:
        raise ValueError(f"unsupported transaction log value version {version}")
    flexible = version >= 1
    out = bytearray(I16.pack(version))
    out += I64.pack(value.producer_id)
    out += I16.pack(value.producer_epoch)
    out += I32.pack(value.timeout_ms)
    out += I8.pack(value.status)
    out += _encode_partitions(value.partitions, flexible)
    out += I64.pack(value.last_update_ms)
    out += I64.pack(value.start_ms)
    if flexible:
        out += _tagged_fields(value)
    return bytes(out)


# ---------------------------------------------------------------- decoding


def known_versions(key: bytes, value: bytes | None) -> bool:
    """Whether `decode_key` and `decode_value` know the record's versions (a load skips it
    otherwise, as Kafka does), read from their first two bytes alone."""
    if len(key) < 2 or (value is not None and len(value) < 2):
        raise TransactionLogDecodeError("a record shorter than its version")
    if I16.unpack_from(key)[0] != KEY_VERSION:
        return False
    return value is None or I16.unpack_from(value)[0] in VALUE_VERSIONS


def decode_key(data: bytes | memoryview) -> str:
    reader = Reader(data, error=TransactionLogDecodeError)
    version = reader.unpack(I16)
    if version != KEY_VERSION:
        raise UnknownRecordVersion("transaction log key", version)
    return reader.string(flexible=False)


def _decode_partitions(reader: Reader, flexible: bool) -> PartitionsField | None:
    count = reader.nullable_array_len(flexible)
    if count is None:
        return None
    entries: list[tuple[str, tuple[int, ...]]] = []
    for _ in range(count):
        topic = reader.string(flexible)
        n = reader.nullable_array_len(flexible)
        if n is None:
            raise TransactionLogDecodeError("null PartitionIds")
        ids = tuple(reader.unpack(I32) for _ in range(n))
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
    reader = Reader(data, error=TransactionLogDecodeError)
    version = reader.unpack(I16)
    if version not in VALUE_VERSIONS:
        raise UnknownRecordVersion("transaction log value", version)
    flexible = version >= 1
    producer_id = reader.unpack(I64)
    producer_epoch = reader.unpack(I16)
    timeout_ms = reader.unpack(I32)
    status = reader.unpack(I8)
    partitions = _decode_partitions(reader, flexible)
    last_update_ms = reader.unpack(I64)
    start_ms = reader.unpack(I64)
    tagged = reader.skip_tagged() if flexible else {}
    return TxnLogValue(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        timeout_ms=timeout_ms,
        status=status,
        partitions=partitions,
        last_update_ms=last_update_ms,
        start_ms=start_ms,
        previous_producer_id=_tagged_int(tagged, _TAG_PREVIOUS_PRODUCER_ID, I64, -1),
        next_producer_id=_tagged_int(tagged, _TAG_NEXT_PRODUCER_ID, I64, -1),
        client_transaction_version=_tagged_int(tagged, _TAG_CLIENT_TRANSACTION_VERSION, I16, 0),
    )
