"""A step of the broker's realtime clock (an NTP step, a host set minutes wrong) moves no
group deadline: Kafka's group coordinator times sessions, joins and syncs on its timer wheel
(System.nanoTime), so a member that stops heartbeating is expired its session timeout after
its last heartbeat, however the wall clock jumped meanwhile.

The broker runs under libfaketime (Debian's faketime, installed by `make chaos-deps`) with only
its realtime clock faked, driven by a file (as the chaos campaign's clock nemeses do). Gregor
kept these deadlines on the wall clock: heartbeats taken while the clock was ahead kept a
member that then died alive for the jump's size after the clock stepped back, and a step
ahead expired the members whose heartbeat did not come first (seed 81's consumers waited
minutes after `clock-skew` on their group's coordinator)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from tests.chaos.hosts import FAKETIME_LIB
from tests.integration.harness import BrokerProcess, unique_topic, wait_until
from tests.integration.test_groups_member import create_topic

pytestmark = pytest.mark.integration

SESSION_MS = 3000
OVERRIDES = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 1000,
             "offsets.topic.num.partitions": 1}


@pytest.fixture(scope="module")
def skewed_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, Path]]:
    if not FAKETIME_LIB.exists():
        raise AssertionError(f"libfaketime missing ({FAKETIME_LIB}): run `make chaos-deps`")
    broker = BrokerProcess(tmp_path_factory.mktemp("clock-steps"), OVERRIDES)
    clock = broker.workdir / "faketime"
    clock.write_text("+0\n")
    broker.env = {"LD_PRELOAD": str(FAKETIME_LIB), "FAKETIME_TIMESTAMP_FILE": str(clock),
                  "FAKETIME_CACHE_DURATION": "1", "DONT_FAKE_MONOTONIC": "1"}
    broker.start()
    try:
        yield broker, clock
    finally:
        broker.close()


def member(broker: BrokerProcess, group: str, topic: str) -> Consumer:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 300})
    consumer.subscribe([topic])
    return consumer


def poll_for(consumer: Consumer, seconds: float) -> None:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        consumer.poll(0.1)


MEMBER_PROCESS = """
import sys
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
              "session.timeout.ms": int(sys.argv[4]), "heartbeat.interval.ms": 300})
c.subscribe([sys.argv[3]])
while True:
    c.poll(0.1)
"""


def test_a_member_that_dies_with_the_clock_ahead_is_expired_after_its_session(
    skewed_broker: tuple[BrokerProcess, Path],
) -> None:
    """Two members; the clock runs 300 s ahead, one member is killed (SIGKILL: no LeaveGroup),
    and the clock steps back: the other takes over the dead one's partition once its session
    timeout has passed since its last heartbeat, not 300 s later."""
    broker, clock = skewed_broker
    topic, group = unique_topic("clock-dies"), unique_topic("clock-dies-group")
    create_topic(broker.port, topic, 2)
    survivor = member(broker, group, topic)
    doomed = subprocess.Popen([sys.executable, "-c", MEMBER_PROCESS, broker.bootstrap, group, topic,
                               str(SESSION_MS)])
    try:
        def split() -> bool:
            poll_for(survivor, 0.1)
            return len(survivor.assignment()) == 1

        wait_until(split, timeout=30, msg="the partitions split")
        clock.write_text("+300\n")
        poll_for(survivor, 2 * SESSION_MS / 1000)  # both heartbeat with the clock ahead
        wait_until(split, timeout=30, msg="the partitions split with the clock ahead")
        doomed.kill()
        doomed.wait()
        clock.write_text("+0\n")
        wait_until(lambda: poll_for(survivor, 0.1) or len(survivor.assignment()) == 2,
                   timeout=4 * SESSION_MS / 1000, msg="the survivor took the dead member's partition")
    finally:
        doomed.kill()
        survivor.close()
        clock.write_text("+0\n")
