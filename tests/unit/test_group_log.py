"""__consumer_offsets key/value codecs: hand-built bytes for every version we write, round trips."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.group_log import (
    GroupLogDecodeError,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    UnknownRecordVersion,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_key,
    encode_offset_commit_key,
    encode_offset_commit_value,
    parse_consumer_subscription_topics,
)


def s16(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def compact(text: str) -> bytes:
    data = text.encode()
    return bytes([len(data) + 1]) + data


def test_offset_commit_key_v1_bytes() -> None:
    raw = encode_offset_commit_key("g", "orders", 3)
    assert raw == b"\x00\x01" + s16("g") + s16("orders") + b"\x00\x00\x00\x03"
    assert decode_key(raw) == OffsetCommitKey("g", "orders", 3)


def test_offset_commit_key_v0_is_read() -> None:
    assert decode_key(b"\x00\x00" + s16("g") + s16("t") + b"\x00\x00\x00\x07") == OffsetCommitKey("g", "t", 7)


def test_group_metadata_key_v2_bytes() -> None:
    raw = encode_group_metadata_key("my-group")
    assert raw == b"\x00\x02" + s16("my-group")
    assert decode_key(raw) == GroupMetadataKey("my-group")
    assert encode_key(GroupMetadataKey("my-group")) == raw
    assert encode_key(OffsetCommitKey("g", "t", 1)) == encode_offset_commit_key("g", "t", 1)


def test_unknown_key_version_is_skippable() -> None:
    with pytest.raises(UnknownRecordVersion):
        decode_key(b"\x00\x03" + s16("g"))


def test_offset_commit_value_v3_is_written_without_expire_timestamp() -> None:
    value = OffsetCommitValue(offset=42, leader_epoch=5, metadata="m", commit_timestamp=1000)
    raw = encode_offset_commit_value(value)
    expected = b"\x00\x03" + struct.pack(">q", 42) + struct.pack(">i", 5) + s16("m") + struct.pack(">q", 1000)
    assert raw == expected
    assert decode_offset_commit_value(raw) == value


def test_offset_commit_value_v1_when_expire_timestamp_set() -> None:
    value = OffsetCommitValue(offset=7, metadata="", commit_timestamp=10, expire_timestamp=99)
    raw = encode_offset_commit_value(value)
    assert raw == b"\x00\x01" + struct.pack(">q", 7) + s16("") + struct.pack(">q", 10) + struct.pack(">q", 99)
    assert decode_offset_commit_value(raw) == value  # leader epoch absent in v1: -1


def test_offset_commit_value_v0_v2_v4_decode() -> None:
    v0 = b"\x00\x00" + struct.pack(">q", 1) + s16("x") + struct.pack(">q", 2)
    assert decode_offset_commit_value(v0) == OffsetCommitValue(1, -1, "x", 2, -1)
    v2 = b"\x00\x02" + v0[2:]
    assert decode_offset_commit_value(v2) == OffsetCommitValue(1, -1, "x", 2, -1)
    v4 = b"\x00\x04" + struct.pack(">q", 1) + struct.pack(">i", 9) + compact("x") + struct.pack(">q", 2)
    v4 += b"\x01\x05\x02\xab\xcd"  # an unknown tagged field is skipped
    assert decode_offset_commit_value(v4) == OffsetCommitValue(1, 9, "x", 2, -1)
    assert encode_offset_commit_value(OffsetCommitValue(1, 9, "x", 2), version=4) == v4[:-5] + b"\x00"


MEMBER = MemberMetadata("m-1", "inst", "client", "/127.0.0.1", 30000, 10000, b"sub", b"asg")


def test_group_metadata_value_v3_bytes() -> None:
    value = GroupMetadataValue("consumer", 4, "range", "m-1", 1234, (MEMBER,))
    raw = encode_group_metadata_value(value)
    member = (
        s16("m-1") + s16("inst") + s16("client") + s16("/127.0.0.1")
        + struct.pack(">ii", 30000, 10000)
        + struct.pack(">i", 3) + b"sub" + struct.pack(">i", 3) + b"asg"
    )  # fmt: skip
    expected = (
        b"\x00\x03" + s16("consumer") + struct.pack(">i", 4) + s16("range") + s16("m-1")
        + struct.pack(">q", 1234) + struct.pack(">i", 1) + member
    )  # fmt: skip
    assert raw == expected
    assert decode_group_metadata_value(raw) == value


def test_empty_group_metadata_value_has_null_protocol_and_leader() -> None:
    value = GroupMetadataValue("", 0, None, None, 5, ())
    raw = encode_group_metadata_value(value)
    assert (
        raw
        == b"\x00\x03" + s16("") + b"\x00\x00\x00\x00" + b"\xff\xff" * 2 + struct.pack(">q", 5) + b"\x00" * 4
    )
    assert decode_group_metadata_value(raw) == value


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_group_metadata_value_every_version_round_trips(version: int) -> None:
    value = GroupMetadataValue("consumer", 1, "range", "m-1", 77, (MEMBER,))
    decoded = decode_group_metadata_value(encode_group_metadata_value(value, version))
    expected_member = MemberMetadata(
        "m-1",
        "inst" if version >= 3 else None,
        "client",
        "/127.0.0.1",
        30000 if version >= 1 else -1,
        10000,
        b"sub",
        b"asg",
    )
    assert decoded == GroupMetadataValue(
        "consumer", 1, "range", "m-1", 77 if version >= 2 else -1, (expected_member,)
    )


def test_group_metadata_value_v4_is_flexible() -> None:
    raw = encode_group_metadata_value(GroupMetadataValue("c", 1, None, None, -1, ()), 4)
    assert (
        raw
        == b"\x00\x04"
        + compact("c")
        + b"\x00\x00\x00\x01"
        + b"\x00\x00"
        + struct.pack(">q", -1)
        + b"\x01\x00"
    )


def test_truncated_and_unknown_values() -> None:
    with pytest.raises(GroupLogDecodeError):
        decode_offset_commit_value(b"\x00\x03\x00")
    with pytest.raises(UnknownRecordVersion):
        decode_offset_commit_value(b"\x00\x05" + b"\x00" * 30)
    with pytest.raises(UnknownRecordVersion):
        decode_group_metadata_value(b"\x00\x09")


def test_consumer_subscription_topics() -> None:
    sub = b"\x00\x01" + struct.pack(">i", 2) + s16("a") + s16("b") + struct.pack(">i", -1)
    assert parse_consumer_subscription_topics(sub) == frozenset({"a", "b"})
    assert parse_consumer_subscription_topics(b"\x00") is None


names = st.text(max_size=20)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)


@given(names, names, i32)
def test_offset_commit_key_round_trip(group: str, topic: str, partition: int) -> None:
    assert decode_key(encode_offset_commit_key(group, topic, partition)) == OffsetCommitKey(
        group, topic, partition
    )


@given(i64, i32, names, i64, st.one_of(st.just(-1), i64))
def test_offset_commit_value_round_trip(offset: int, epoch: int, metadata: str, ts: int, expire: int) -> None:
    value = OffsetCommitValue(offset, -1 if expire != -1 else epoch, metadata, ts, expire)
    assert decode_offset_commit_value(encode_offset_commit_value(value)) == value


members = st.builds(
    MemberMetadata,
    names,
    st.none() | names,
    names,
    names,
    i32,
    i32,
    st.binary(max_size=30),
    st.binary(max_size=30),
)


@given(
    names,
    i32,
    st.none() | names,
    st.none() | names,
    i64,
    st.lists(members, max_size=3),
    st.sampled_from([3, 4]),
)
def test_group_metadata_value_round_trip(
    ptype: str,
    gen: int,
    proto: str | None,
    leader: str | None,
    ts: int,
    ms: list[MemberMetadata],
    version: int,
) -> None:
    value = GroupMetadataValue(ptype, gen, proto, leader, ts, tuple(ms))
    assert decode_group_metadata_value(encode_group_metadata_value(value, version)) == value


@given(st.binary(max_size=64))
def test_arbitrary_bytes_only_raise_decode_errors(data: bytes) -> None:
    for decode in (decode_key, decode_offset_commit_value, decode_group_metadata_value):
        try:
            decode(data)
        except GroupLogDecodeError:
            pass
