"""Racks in a consumer-protocol group (KIP-848): Kafka 4.4's server-side assignors, ``uniform``
and ``range``, do not look at racks (neither a member's rack id nor the racks of a partition's
replicas: the assignor API offers both, and the built-in assignors read neither), so neither
does Gregor. Here both brokers have ``broker.rack`` set, a member in another rack joins first
and one in the broker's rack second: a rack-aware assignor would hand the second member the
partitions the first holds (the rack-aware client-side range assignor gives a matching member
its quota from the start), Kafka and Gregor both give it the positional range or the uniform
assignor's sticky share, and describe both members with their rack ids.

A pair of its own, as the suite's pair has no racks (adding one there would change every
Metadata answer of the suite)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.differential.cases import Cases, versions
from tests.differential.conftest import SHARED, Pair, _warm_coordinators
from tests.differential.runner import Side, run_case
from tests.differential.steps import new_topic
from tests.differential.test_consumer_groups import HEARTBEAT, beat, describe, join
from tests.integration.harness import started_broker
from tests.integration.kafka import started_kafka
from tests.integration.wire import WireClient

BROKER_RACK = "rack-a"


@pytest.fixture(scope="module")
def rack_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    racked = {**SHARED, "broker.rack": BROKER_RACK}
    kafka_dir: Path = tmp_path_factory.mktemp("kafka-racks")
    with started_kafka(kafka_dir, racked) as kafka, started_broker(
        tmp_path_factory.mktemp("gregor-racks"), racked
    ) as gregor:
        for port in (kafka.port, gregor.port):
            _warm_coordinators(port)
        yield Pair(kafka, gregor)


@pytest.fixture
def rack_sides(rack_pair: Pair) -> Iterator[tuple[Side, Side]]:
    topic = f"d-{uuid.uuid4().hex[:10]}"
    with WireClient(rack_pair.kafka.port) as k, WireClient(rack_pair.gregor.port) as g:
        yield (Side("kafka", k, rack_pair.kafka.bootstrap, vars={"t": topic}),
               Side("gregor", g, rack_pair.gregor.bootstrap, vars={"t": topic}))


def named(side: Side) -> None:
    """Member ids both brokers share, so that the range assignor's member order is the same."""
    side.vars.update(member1="member-1", member2="member-2")


def racks(v: int, assignor: str) -> list[Any]:
    """member-1 in another rack than every replica, member-2 in the broker's rack."""
    return [
        *new_topic(partitions=4),
        named,
        join(v, "1", rack_id="rack-b", server_assignor=assignor),  # all four partitions
        join(v, "2", rack_id=BROKER_RACK, server_assignor=assignor),  # nothing yet: member-1 holds them
        beat(v, who="1", report=True),  # member-1 is asked to give up 2 and 3, whichever its rack
        beat(v, who="1", report=True),
        beat(v, who="2", report=True),  # member-2 gets 2 and 3
        describe(v),
    ]


CASES: Cases = {}
for version in versions(HEARTBEAT):
    for name in ("uniform", "range"):
        CASES[f"consumer-group-racks-{name}-v{version}"] = racks(version, name)


@pytest.mark.parametrize("name", list(CASES))
def test_case(name: str, rack_sides: tuple[Side, Side]) -> None:
    run_case(CASES[name], *rack_sides)
