"""A message encoded around one array field whose items are encoded already.

A large answer made mostly of parts that change rarely (Metadata's topics) need not be
encoded field by field on every request: each item is encoded once per version
(`encode_item`) and kept by its owner, and `encode_spliced` writes the message's other
fields around the kept bytes. The result is byte for byte what the message's own `encode`
gives (tests/unit/test_spliced.py holds them equal over every version).
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.schemas.fields.codecs import Int32, UnsignedVarInt32


def _field(message: type[ApiMessage], name: str) -> Any:
    return message._struct.fields[name]


def encode_item(message: type[ApiMessage], array: str, item: object, version: int) -> bytes:
    """One item of `message`'s array field `array`, as the message encodes it at `version`."""
    flexible = message.flexible_version_q(version)
    encoded: bytes = _field(message, array).array_of.encode(
        item, version=version, compact=flexible, tagged=flexible)
    return encoded


def encode_spliced(message: ApiMessage, array: str, items: list[bytes], version: int) -> bytes:
    """`message` at `version` with its array field `array` made of `items` (each from
    `encode_item`). The message's own encoding with the field empty gives the other fields'
    bytes (its compiled encoder; the field is put back after); the fields before the array
    are encoded once more only to find where it starts."""
    flexible = message.flexible_version_q(version)
    before = 0
    for field in message._struct.untagged_fields(version):
        if field.name == array:
            break
        before += len(field.encode(getattr(message, field.name), version=version, compact=flexible,
                                   tagged=flexible))
    kept = getattr(message, array)
    setattr(message, array, [])
    try:
        empty: bytes = message.encode(version=version)
    finally:
        setattr(message, array, kept)
    after = before + (1 if flexible else 4)  # the empty array's length
    count = UnsignedVarInt32.encode(len(items) + 1) if flexible else Int32.encode(len(items))
    return b"".join([empty[:before], count, *items, empty[after:]])
