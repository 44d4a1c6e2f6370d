"""Size-prefixed framing (sans-I/O): every request is an i32 length + payload."""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")
SIZE_PREFIX = _SIZE.size


class FrameSizeError(ValueError):
    """The size prefix is negative or above the configured maximum."""


def frame_size(prefix: bytes, max_size: int, limit: str = "socket.request.max.bytes") -> int:
    """The frame's size from its prefix; FrameSizeError when negative or above `max_size` (the
    configuration key `limit`)."""
    (size,) = _SIZE.unpack(prefix)
    if size < 0:
        raise FrameSizeError(f"negative frame size {size}")
    if size > max_size:
        raise FrameSizeError(f"frame of {size} bytes is larger than {limit} ({max_size})")
    return int(size)


def frame(payload: bytes | bytearray | memoryview) -> bytes:
    return _SIZE.pack(len(payload)) + bytes(payload)


Frame = list[bytes | bytearray | memoryview]  # a size prefix and the parts, for a vectored write


def frame_parts(*parts: bytes | bytearray | memoryview) -> Frame:
    """Size prefix plus the parts, for a vectored write without joining."""
    size = sum(len(p) for p in parts)
    return [_SIZE.pack(size), *parts]
