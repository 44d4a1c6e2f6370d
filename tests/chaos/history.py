"""What a campaign records: every client operation with its invocation and completion time
and its outcome, every fault with its start and stop (Jepsen's history), and what the clients
saw that is not an operation (errors, exceptions, rebalances), counted per second.

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

    def to_json(self) -> dict[str, Any]:
        """As `asdict` would give it, written out: `asdict` copies deeply and took over two
        minutes for the million operations of a two-hour run on a loaded machine."""
        return {
            "process": self.process, "kind": self.kind, "invoke_s": self.invoke_s,
            "complete_s": self.complete_s, "outcome": self.outcome,
            "writes": [{"key": w.key, "value": w.value, "offset": w.offset} for w in self.writes],
            "reads": [{"key": r.key, "offset": r.offset, "value": r.value} for r in self.reads],
            "committed_reader": self.committed_reader, "commit_s": self.commit_s,
        }

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


@dataclass(frozen=True, slots=True)
class Note:
    """What one client saw that is not an operation, counted per second: `count` times in the
    second from `at_s` it saw `what` (a call, a callback) end in `name` (an error's name, an
    exception's class, an event); `detail` is the first one's message."""

    process: ProcessId
    at_s: float
    what: str
    name: str
    count: int = 1
    detail: str = ""


class NoteCounter:
    """Notes counted per process, kind and second, so that a storm of one error is one note a
    second (pure: the caller says when; not thread-safe: the caller locks)."""

    def __init__(self) -> None:
        self._found: dict[tuple[str, str, str, int], Note] = {}

    def add(self, process: str, what: str, name: str, detail: str, at_s: float) -> None:
        key = (process, what, name, int(at_s))
        first = self._found.get(key)
        if first is None:
            self._found[key] = Note(ProcessId(process), float(int(at_s)), what, name, 1, detail[:300])
        else:
            self._found[key] = Note(first.process, first.at_s, what, name, first.count + 1, first.detail)

    def notes(self) -> list[Note]:
        return sorted(self._found.values(), key=lambda n: (n.at_s, n.process, n.what, n.name))


@dataclass
class History:
    """The one owner of a campaign's record (appended to by the workloads and the nemeses)."""

    ops: list[Op] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"ops": [o.to_json() for o in list(self.ops)], "faults": [asdict(f) for f in self.faults],
                "notes": [asdict(n) for n in self.notes]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> History:
        return cls([Op.from_json(o) for o in data["ops"]], [Fault(**f) for f in data["faults"]],
                   [Note(**n) for n in data.get("notes", ())])

    def notes_of(self, process: str, from_s: float, to_s: float) -> list[Note]:
        """What `process` saw in the seconds from `from_s` to `to_s`."""
        return [n for n in self.notes if n.process == process and from_s - 1 < n.at_s <= to_s]

    def save(self, path: Path) -> None:
        """Written aside and renamed: a save cut short leaves no history rather than half of one."""
        partial = path.with_name(path.name + ".partial")
        partial.write_text(json.dumps(self.to_json()))
        partial.replace(path)

    @classmethod
    def load(cls, path: Path) -> History:
        return cls.from_json(json.loads(path.read_text()))
