"""gregor_spark's offset arithmetic: options, admission control and range planning (no Spark run)."""

from __future__ import annotations

import pytest

from gregor_spark.kafka import OptionError, from_json_offsets, parse_offsets_json, to_json_offsets
from gregor_spark.sink import SinkOptions
from gregor_spark.source import EARLIEST, OffsetRange, _concrete, capped, plan

A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)


def test_offsets_json_round_trip() -> None:
    offsets = {A1: 7, A0: 42, B0: 0}
    assert to_json_offsets(offsets) == {"a": {"0": 42, "1": 7}, "b": {"0": 0}}
    assert from_json_offsets(to_json_offsets(offsets)) == offsets
    assert parse_offsets_json('{"a": {"0": -2, "1": 5}}', "startingOffsets") == {A0: -2, A1: 5}


@pytest.mark.parametrize("text", ["", "[1]", '{"a": [1]}', '{"a": {"x": 1}}', '{"a": {"0": "y"}}'])
def test_bad_offsets_json_is_an_option_error(text: str) -> None:
    with pytest.raises(OptionError, match="startingOffsets"):
        parse_offsets_json(text, "startingOffsets")


def test_earliest_and_latest_resolve_to_the_watermarks() -> None:
    assert _concrete(-2, (3, 9)) == 3
    assert _concrete(-1, (3, 9)) == 9
    assert _concrete(5, (3, 9)) == 5
    with pytest.raises(OptionError):
        _concrete(-3, (3, 9))


def test_capped_shares_the_limit_in_proportion_to_the_backlog() -> None:
    start, end = {A0: 0, A1: 10}, {A0: 30, A1: 20}
    assert capped(start, end, 100) == end
    assert capped(start, end, 8) == {A0: 6, A1: 12}
    # A limit smaller than the partitions still moves one partition by one.
    assert capped({A0: 0, A1: 0}, {A0: 1, A1: 1}, 1) == {A0: 1, A1: 0}
    # A partition new since `start` counts from 0.
    assert capped({A0: 5}, {A0: 5, B0: 4}, 2) == {A0: 5, B0: 2}


def test_plan_keeps_only_partitions_with_something_to_read_in_a_stable_order() -> None:
    ranges = plan({B0: 4, A1: 3, A0: 7}, {B0: 9, A1: 3, A0: 8})
    assert ranges == [OffsetRange("a", 0, 7, 8), OffsetRange("b", 0, 4, 9)]
    assert plan({}, {A0: 2}) == [OffsetRange("a", 0, EARLIEST, 2)]


def test_sink_options() -> None:
    opts = SinkOptions.parse({"kafka.bootstrap.servers": "h:1", "Topic": "out", "commitTopic": "c",
                              "exactlyOnce": "FALSE"})
    assert (opts.topic, opts.commit_topic, opts.prefix) == ("out", "c", "gregor-spark")
    assert not opts.exactly_once
    with pytest.raises(OptionError, match="bootstrap"):
        SinkOptions.parse({"topic": "out"})
