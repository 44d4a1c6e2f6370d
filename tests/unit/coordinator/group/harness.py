"""A fake broker around GroupCoordinatorMachine: an in-memory __consumer_offsets log, replay after
every append, parked answers collected by (group, member, kind), and a fake clock."""

from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass
from typing import TypeVar

from coordinator.group import (
    Completion,
    GroupConfig,
    GroupCoordinatorMachine,
    JoinRequest,
    JoinResponse,
    Kind,
    Result,
    SyncRequest,
    SyncResponse,
)

T = TypeVar("T")
GROUP = "g"


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0."""
    out = b"\x00\x00" + struct.pack(">i", len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    return out + struct.pack(">i", -1)


PROTOCOLS = (("range", subscription("t")),)


@dataclass
class Entry:
    key: bytes | None  # None: a transaction marker
    value: bytes | None
    producer_id: int = -1
    commit: bool = False


class Harness:
    def __init__(self, config: GroupConfig | None = None) -> None:
        self.config = config or GroupConfig(num_partitions=1, initial_rebalance_delay_ms=0)
        self.now = 0
        self.log: list[Entry] = []
        self.answers: dict[tuple[str, str, Kind], JoinResponse | SyncResponse] = {}
        self.machine = self._new_machine()
        self.machine.begin_load(0, 1)
        self.machine.finish_load(0, self.now)

    def _new_machine(self) -> GroupCoordinatorMachine:
        counter = itertools.count(1)
        return GroupCoordinatorMachine(self.config, new_member_id=lambda prefix: f"{prefix}-{next(counter)}")

    def deliver(self, completions: tuple[Completion, ...] | list[Completion]) -> None:
        for c in completions:
            self.answers[(c.group_id, c.member_id, c.kind)] = c.response

    def apply(self, result: Result[T], producer_id: int = -1) -> T | None:
        """Append the records, replay them, then release the answers."""
        for key, value in result.records:
            offset = len(self.log)
            self.log.append(Entry(key, value, producer_id))
            self.deliver(
                self.machine.replay(key, value, offset=offset, producer_id=producer_id, now_ms=self.now)
            )
        self.deliver(result.completions)
        return result.response

    def marker(self, producer_id: int, commit: bool) -> None:
        self.log.append(Entry(None, None, producer_id, commit))
        self.machine.complete_transaction(0, producer_id, commit)

    def tick(self, to_ms: int) -> None:
        self.now = to_ms
        self.apply(self.machine.on_timer(self.now))

    def failover(self) -> GroupCoordinatorMachine:
        """A new coordinator loads the partition from the log."""
        machine = self._new_machine()
        machine.begin_load(0, 2)
        for offset, e in enumerate(self.log):
            if e.key is None:
                machine.complete_transaction(0, e.producer_id, e.commit)
            else:
                machine.replay(e.key, e.value, offset=offset, producer_id=e.producer_id)
        machine.finish_load(0, self.now)
        self.machine = machine
        return machine

    # ------------------------------------------------------------ client calls

    def join(
        self,
        member_id: str = "",
        *,
        instance: str | None = None,
        version: int = 9,
        protocols: tuple[tuple[str, bytes], ...] = PROTOCOLS,
        session_ms: int = 10_000,
        rebalance_ms: int = 30_000,
        client_id: str = "c",
    ) -> tuple[JoinResponse | None, str | None]:
        """The immediate response (None if parked) and the member id it is parked under."""
        req = JoinRequest(
            GROUP,
            member_id,
            "consumer",
            protocols,
            session_ms,
            rebalance_ms,
            instance,
            client_id,
            "/h",
            version,
        )
        result = self.machine.join_group(req, self.now)
        response = self.apply(result)
        return response, result.awaits

    def join_answer(self, member_id: str) -> JoinResponse:
        answer = self.answers.pop((GROUP, member_id, Kind.JOIN))
        assert isinstance(answer, JoinResponse)
        return answer

    def sync_answer(self, member_id: str) -> SyncResponse:
        answer = self.answers.pop((GROUP, member_id, Kind.SYNC))
        assert isinstance(answer, SyncResponse)
        return answer

    def sync(
        self,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        instance: str | None = None,
    ) -> SyncResponse | None:
        req = SyncRequest(GROUP, generation, member_id, assignments or {}, instance)
        return self.apply(self.machine.sync_group(req, self.now))

    def heartbeat(self, member_id: str, generation: int, instance: str | None = None) -> object:
        return self.apply(self.machine.heartbeat(GROUP, member_id, generation, self.now, instance))

    def new_member(self, **kw: object) -> str:
        """Member-id-required round trip; returns the member id (its JoinGroup is parked)."""
        first, _ = self.join(**kw)  # type: ignore[arg-type]
        assert first is not None and first.error.name == "MEMBER_ID_REQUIRED"
        _, parked = self.join(first.member_id, **kw)  # type: ignore[arg-type]
        assert parked == first.member_id
        return first.member_id

    def stable_group(self, n: int) -> tuple[list[str], int]:
        """n dynamic members, joined and synced; returns (member ids, generation)."""
        ids = [self.new_member(client_id=f"c{i}") for i in range(n)]
        self.tick(self.now)  # the initial-rebalance delay (0 here) expires
        answers = {m: self.join_answer(m) for m in ids}
        leader = answers[ids[0]].leader
        generation = answers[ids[0]].generation_id
        for m in ids:
            if m != leader:
                assert self.sync(m, generation) is None
        self.sync(leader, generation, {m: m.encode() for m in ids})
        for m in ids:
            assert self.sync_answer(m).assignment == m.encode()
        return ids, generation
