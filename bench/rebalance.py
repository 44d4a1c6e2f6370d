"""The time a consumer group takes to rebalance when one member joins (`make bench`): ten
members of one group share a topic of 22 partitions, an eleventh joins, and the clock runs from
the eleventh's subscribe until every member holds its new assignment (two partitions each), as
the members' own rebalance callbacks report it.

Two protocols, with confluent-kafka (librdkafka) members, all in this process (one thread per
consumer, polling every 20 ms):
- classic: JoinGroup / SyncGroup with librdkafka's default assignor (range, eager): a
  stop-the-world rebalance, every member revokes everything and rejoins;
- consumer (KIP-848, ``group.protocol=consumer``): the broker's uniform assignor and per-member
  reconciliation, a partition moving only once its owner revoked it.

Each round is a new group: the ten members start and settle, then the eleventh joins; the row
is the p50 over ROUNDS rounds (min and max beside it). The waits are set small and the same on
both servers, so that a heartbeat is not what is measured: the classic members' heartbeat 250 ms
(session 6 s, Kafka's smallest by default), the broker's ``group.consumer.heartbeat.interval.ms``
250 ms (session 6 s) and ``group.consumer.assignment.interval.ms`` 0 (Kafka 4.4 batches target
assignments a second apart by default; the group here was stable for longer than that anyway),
``group.initial.rebalance.delay.ms`` 0.

Apache Kafka 4.4.0 (bench/reference.py) runs the same rounds in the same run. The figures are
milliseconds, lower is better, so they are not judged against bench/baseline.json.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer

from bench import reference
from bench.reference import Comparison, Server

BENCHMARK = "rebalance"
PARTITIONS = 22
MEMBERS = 10
ROUNDS = 5
HEARTBEAT_MS = 250
SESSION_MS = 6000
POLL_S = 0.02
SETTLE_S = 1.0  # after the ten are balanced: the group's last heartbeats acknowledged
TIMEOUT_S = 60.0
BROKER = {
    "group.initial.rebalance.delay.ms": 0,
    "group.consumer.min.heartbeat.interval.ms": 100,
    "group.consumer.heartbeat.interval.ms": HEARTBEAT_MS,
    "group.consumer.min.session.timeout.ms": SESSION_MS,
    "group.consumer.session.timeout.ms": SESSION_MS,
    "group.consumer.assignment.interval.ms": 0,
}
PROTOCOLS = {
    "classic": "classic protocol (range, eager)",
    "consumer": "consumer protocol (uniform)",
}


class Group:
    """The members of one group, each a consumer polled by its own thread; their assignments as
    their rebalance callbacks report them, and when the wanted spread was last reached."""

    def __init__(self, bootstrap: str, topic: str, protocol: str) -> None:
        self.bootstrap, self.topic, self.protocol = bootstrap, topic, protocol
        self.group_id = f"bench-rebalance-{protocol}-{uuid.uuid4().hex[:8]}"
        self.owned: dict[int, set[int]] = {}
        self.changed = threading.Condition()
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.spread_at = 0.0

    def _conf(self) -> dict[str, Any]:
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap, "group.id": self.group_id, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "log_level": 2,
        }
        if self.protocol == "consumer":
            return {**conf, "group.protocol": "consumer"}
        return {**conf, "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS}

    def _update(self, member: int, tps: list[Any], added: bool) -> None:
        parts = {tp.partition for tp in tps}
        with self.changed:
            mine = self.owned.setdefault(member, set())
            if self.protocol == "classic":  # eager: the callbacks name the whole assignment
                mine.clear()
                mine |= parts if added else set()
            else:  # incremental: the partitions added or taken away
                mine |= parts if added else set()
                mine -= set() if added else parts
            if self._spread():
                self.spread_at = time.monotonic()
                self.changed.notify_all()

    def _run(self, member: int, consumer: Consumer, started: list[float]) -> None:
        started.append(time.monotonic())
        consumer.subscribe(
            [self.topic],
            on_assign=lambda _c, tps: self._update(member, tps, True),
            on_revoke=lambda _c, tps: self._update(member, tps, False),
            on_lost=lambda _c, tps: self._update(member, tps, False),
        )
        while not self.stop.is_set():
            consumer.poll(POLL_S)
        consumer.close()

    def join(self) -> float:
        """One more member, subscribing in its own thread; the monotonic time it subscribed."""
        member, started = len(self.threads), list[float]()
        consumer = Consumer(self._conf())
        with self.changed:
            self.owned[member] = set()
        thread = threading.Thread(target=self._run, args=(member, consumer, started), daemon=True)
        self.threads.append(thread)
        thread.start()
        while not started:
            time.sleep(0.001)
        return started[0]

    def _spread(self) -> bool:
        sizes = [len(ps) for ps in self.owned.values()]
        together = set().union(*self.owned.values())
        return sum(sizes) == PARTITIONS == len(together) and max(sizes) - min(sizes) <= 1

    def wait_spread(self) -> float:
        """Until every member holds its share, each partition once; the monotonic time of that."""
        deadline = time.monotonic() + TIMEOUT_S
        with self.changed:
            while not self._spread():
                left = deadline - time.monotonic()
                assert left > 0, f"{self.group_id}: not spread after {TIMEOUT_S} s: {self.owned}"
                self.changed.wait(left)
            return self.spread_at

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)


def one_round(server: Server, topic: str, protocol: str) -> float:
    """Milliseconds from the eleventh member's subscribe to the new spread."""
    group = Group(server.bootstrap, topic, protocol)
    try:
        for _ in range(MEMBERS):
            group.join()
        group.wait_spread()
        time.sleep(SETTLE_S)
        joined = group.join()
        return (group.wait_spread() - joined) * 1000
    finally:
        group.close()


def measure(comparison: Comparison, server: Server, rounds: int) -> None:
    topic = server.create_topic(f"bench-rebalance-{uuid.uuid4().hex[:6]}", PARTITIONS, 1)
    for protocol, name in PROTOCOLS.items():
        one_round(server, topic, protocol)  # warm-up: connections, the JIT, the coordinator loaded
        times = [one_round(server, topic, protocol) for _ in range(rounds)]
        detail = f"min {min(times):>6.0f} ms  max {max(times):>6.0f} ms  over {rounds} rounds"
        row = f"{MEMBERS} members + 1 joining, {name}: p50"
        comparison.record(server.side, row, statistics.median(times), "ms", detail, higher=False)


def main() -> None:
    parser = reference.arguments(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]))
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    args = parser.parse_args()
    comparison = Comparison(BENCHMARK)
    with tempfile.TemporaryDirectory(prefix="gregor-bench-rebalance-") as tmp:
        for n, start in enumerate(reference.SINGLE):
            with start(Path(tmp) / str(n), BROKER) as server:
                measure(comparison, server, args.rounds)
    comparison.finish(args.update_baseline)


if __name__ == "__main__":
    main()
