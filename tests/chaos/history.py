"""What a campaign records: every client operation with its invocation and completion time
and its outcome, and every fault with its start and stop (Jepsen's history).

Pure values, no I/O beyond JSON: the workloads append to a `History`, the checker reads it.
"""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NewType

ProcessId = NewType("ProcessId", str)  # one client (a producer, a consumer, a transformer)
Key = tuple[str, int]  # (topic, partition)
NO_OFFSET = -1


class Kind(enum.StrEnum):
    SEND = "send"  # one value, idempotent acks=all producer
    TXN = "txn"  # a transaction: its writes (and, consume-transform-produce, its reads)
    POLL = "poll"  # one poll of a consumer: the records it returned
    ASSIGN = "assign"  # a consumer's position was (re)set: its order checks start over


class Outcome(enum.StrEnum):
    OK = "ok"  # acknowledged / committed / returned
    FAIL = "fail"  # definitely did not happen (an error, an aborted transaction)
    INFO = "info"  # unknown (a time-out): may or may not have happened


@dataclass(frozen=True, slots=True)
class Write:
    key: Key
    value: str
    offset: int = NO_OFFSET  # known once acknowledged


@dataclass(frozen=True, slots=True)
class Read:
    key: Key
    offset: int
    value: str


@dataclass(frozen=True, slots=True)
class Op:
    process: ProcessId
    kind: Kind
    invoke_s: float
    complete_s: float
    outcome: Outcome
    writes: tuple[Write, ...] = ()
    reads: tuple[Read, ...] = ()
    committed_reader: bool = True  # a POLL's isolation: read_committed (True) or not
    commit_s: float | None = None  # a TXN: when commit (or abort) was invoked

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Op:
        return cls(
            ProcessId(data["process"]), Kind(data["kind"]), data["invoke_s"], data["complete_s"],
            Outcome(data["outcome"]),
            tuple(Write((w["key"][0], w["key"][1]), w["value"], w["offset"]) for w in data["writes"]),
            tuple(Read((r["key"][0], r["key"][1]), r["offset"], r["value"]) for r in data["reads"]),
            data["committed_reader"], data["commit_s"],
        )


@dataclass(frozen=True, slots=True)
class Fault:
    nemesis: str
    start_s: float
    stop_s: float
    target: str = ""  # which hosts, as the nemesis names them


@dataclass
class History:
    """The one owner of a campaign's record (appended to by the workloads and the nemeses)."""

    ops: list[Op] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"ops": [asdict(o) for o in self.ops], "faults": [asdict(f) for f in self.faults]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> History:
        return cls([Op.from_json(o) for o in data["ops"]], [Fault(**f) for f in data["faults"]])

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json()))

    @classmethod
    def load(cls, path: Path) -> History:
        return cls.from_json(json.loads(path.read_text()))
