"""Group coordinator query cost against the number of groups it holds.

Two parts:
- the pure GroupCoordinatorMachine with N "simple" groups (offsets only, as left behind by
  consumers that committed and went away) plus a few live groups: ListGroups (all, and with a
  states filter that matches only the live ones), DescribeGroups / OffsetFetch of one group, and
  an OffsetCommit followed by the timer re-arm the broker does after every write
  (next_deadline_ms);
- a real broker over the wire with the same shape: ListGroups (v4, states filter Stable),
  DescribeGroups and OffsetFetch of one group, OffsetCommit.

Prints microseconds per call. Run with `python -m bench.groups [--groups N ...]`.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from coordinator.group import GroupConfig, GroupCoordinatorMachine, JoinRequest, OffsetCommitInput
from coordinator.group.types import Record
from protocol.messages import REQUESTS
from tests.integration.harness import BrokerProcess
from tests.integration.wire import WireClient, create_topic

PARTITIONS = 50
LIVE = 5


def _per_call_us(fn: Callable[[], object], seconds: float = 0.5) -> float:
    calls, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        fn()
        calls += 1
    return elapsed / calls * 1e6


def _replay(machine: GroupCoordinatorMachine, records: tuple[Record, ...], now: int) -> None:
    for offset, (key, value) in enumerate(records):
        machine.replay(key, value, offset=offset, now_ms=now)


def _machine(groups: int) -> GroupCoordinatorMachine:
    machine = GroupCoordinatorMachine(GroupConfig(num_partitions=PARTITIONS, initial_rebalance_delay_ms=0))
    now = 1_000_000
    for p in range(PARTITIONS):
        machine.begin_load(p, 0)
        machine.finish_load(p, now)
    for i in range(groups):
        offsets = {("t", 0): OffsetCommitInput(i, -1, "")}
        result = machine.offset_commit(f"group-{i:06d}", -1, "", offsets, now)
        _replay(machine, result.records, now)
    for i in range(LIVE):
        join = JoinRequest(f"live-{i}", "", "consumer", (("range", b""),), 10_000, 10_000)
        _replay(machine, machine.join_group(join, now).records, now)
    return machine


def bench_machine(groups: int) -> dict[str, float]:
    machine = _machine(groups)
    now = 1_000_000
    commit = {("t", 0): OffsetCommitInput(5, -1, "")}

    def commit_and_rearm() -> None:
        result = machine.offset_commit("group-000001", -1, "", commit, now)
        _replay(machine, result.records, now)
        machine.next_deadline_ms()

    return {
        "list all": _per_call_us(lambda: machine.list_groups()),
        "list states=PreparingRebalance": _per_call_us(lambda: machine.list_groups(["PreparingRebalance"])),
        "describe one": _per_call_us(lambda: machine.describe_groups(["group-000001"])),
        "offset fetch one": _per_call_us(lambda: machine.offset_fetch("group-000001", None)),
        "commit + timer re-arm": _per_call_us(commit_and_rearm),
    }


def _commit(c: WireClient, group: str, topic: str, offset: int) -> None:
    cls = REQUESTS[8]
    T = cls.OffsetCommitRequestTopic
    part = T.OffsetCommitRequestPartition(
        partition_index=0, committed_offset=offset, committed_leader_epoch=-1, committed_metadata=""
    )
    req = cls(
        version=8, group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=[T(name=topic, partitions=[part])],
    )
    c.call(req, 8)


def bench_wire(groups: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp), {"offsets.topic.num.partitions": PARTITIONS}).start()
        try:
            with WireClient(broker.port) as c:
                create_topic(c, "t")
                for i in range(groups):
                    _commit(c, f"group-{i:06d}", "t", i)
                listing = REQUESTS[16](version=4, states_filter=["Stable"])
                describe = REQUESTS[15](version=5, groups=["group-000001"])
                fetch = REQUESTS[9](version=7, group_id="group-000001", topics=None, require_stable=False)
                return {
                    "ListGroups states=Stable": _per_call_us(lambda: c.call(listing, 4)),
                    "DescribeGroups one": _per_call_us(lambda: c.call(describe, 5)),
                    "OffsetFetch one": _per_call_us(lambda: c.call(fetch, 7)),
                    "OffsetCommit one": _per_call_us(lambda: _commit(c, "group-000001", "t", 7)),
                }
        finally:
            broker.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, nargs="+", default=[709, 10_000])
    parser.add_argument("--wire-groups", type=int, default=2_000)
    args = parser.parse_args()
    for n in args.groups:
        for name, us in bench_machine(n).items():
            print(f"machine  {n:>6} groups  {name:<34} {us:>10.1f} us/call")
    for name, us in bench_wire(args.wire_groups).items():
        print(f"wire     {args.wire_groups:>6} groups  {name:<34} {us:>10.1f} us/call")


if __name__ == "__main__":
    main()
