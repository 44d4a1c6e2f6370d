"""Sans-I/O Kafka wire primitives shared by the internal-topic record codecs.

Encoders return ``bytes``; ``Reader`` decodes from a buffer and raises the error class its
caller chooses, so each codec keeps raising its own ``*DecodeError`` types.

``flexible`` selects the compact encodings of flexible versions (KIP-482): lengths as an
unsigned varint of length + 1 (0 meaning null) instead of an i16 (strings) or i32 (bytes,
arrays) with -1 meaning null.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

I8 = struct.Struct(">b")
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")

EMPTY_TAGGED_FIELDS = b"\x00"
"""A tag buffer with no fields."""


# ---------------------------------------------------------------- encoding


def encode_uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_string(s: str | None, flexible: bool) -> bytes:
    if s is None:
        return b"\x00" if flexible else I16.pack(-1)
    data = s.encode("utf-8")
    if flexible:
        return encode_uvarint(len(data) + 1) + data
    if len(data) > 0x7FFF:
        raise ValueError("string longer than 32767 bytes")
    return I16.pack(len(data)) + data


def encode_bytes(b: bytes, flexible: bool) -> bytes:
    return (encode_uvarint(len(b) + 1) if flexible else I32.pack(len(b))) + b


def encode_array_len(n: int | None, flexible: bool) -> bytes:
    """The length prefix of an array of ``n`` elements; None is a null array."""
    if flexible:
        return encode_uvarint(0 if n is None else n + 1)
    return I32.pack(-1 if n is None else n)


def encode_tagged_fields(fields: Iterable[tuple[int, bytes]] = ()) -> bytes:
    """A tag buffer of (tag, data) pairs, written in the order given (ascending tags)."""
    items = list(fields)
    out = bytearray(encode_uvarint(len(items)))
    for tag, data in items:
        out += encode_uvarint(tag) + encode_uvarint(len(data)) + data
    return bytes(out)


# ---------------------------------------------------------------- decoding


class Reader:
    """Reads primitives from ``buf`` in order, raising ``error(message)`` on malformed input."""

    __slots__ = ("buf", "pos", "error")

    def __init__(self, buf: bytes | memoryview, error: type[Exception] = ValueError) -> None:
        self.buf = memoryview(buf)
        self.pos = 0
        self.error = error

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.buf):
            raise self.error(f"truncated at byte {self.pos} (need {n})")
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
                raise self.error("varint too long")

    def nullable_string(self, flexible: bool) -> str | None:
        n = self.uvarint() - 1 if flexible else self.unpack(I16)
        if n < -1:
            raise self.error(f"bad string length {n}")
        if n == -1:
            return None
        try:
            return bytes(self.take(n)).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.error(f"bad utf-8: {exc}") from exc

    def string(self, flexible: bool) -> str:
        s = self.nullable_string(flexible)
        if s is None:
            raise self.error("null string where a string is required")
        return s

    def bytes_(self, flexible: bool) -> bytes:
        n = self.uvarint() - 1 if flexible else self.unpack(I32)
        if n < 0:
            raise self.error("null bytes where bytes are required")
        return bytes(self.take(n))

    def nullable_array_len(self, flexible: bool) -> int | None:
        n = self.uvarint() - 1 if flexible else self.unpack(I32)
        if n < -1:
            raise self.error(f"bad array length {n}")
        if n > len(self.buf) - self.pos:
            raise self.error(f"array length {n} exceeds remaining bytes")
        return None if n == -1 else n

    def array_len(self, flexible: bool) -> int:
        n = self.nullable_array_len(flexible)
        if n is None:
            raise self.error("bad array length -1")
        return n

    def skip_tagged(self) -> dict[int, memoryview]:
        """Reads a tag buffer; returns its fields by tag for callers that know some of them."""
        fields: dict[int, memoryview] = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            fields[tag] = self.take(self.uvarint())
        return fields
