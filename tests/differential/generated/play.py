"""A generated sequence sent to Kafka and to Gregor in lock-step, each answer compared with the
suite's normalisation and accepted-differences table (`runner.unaccepted`); the first step that
differs ends the sequence. A differing sequence is shrunk (whole chunks, then single actions,
removed while the same difference remains) and written as a case file that `replay` runs."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.differential.generated.actions import TOPICS, Act, pause_after, settle, to_step
from tests.differential.generated.model import sequence
from tests.differential.runner import COVERAGE, Side, Step, Tree, api_name, unaccepted
from tests.differential.steps import new_topic
from tests.integration.wire import PeerClosed, WireClient

TRANSACTIONAL = {
    "init", "add_partitions", "add_offsets", "txn_offset_commit", "end_txn", "markers", "produce",
}
ERROR_FIELDS = ("error_code",)


@dataclass(frozen=True)
class Finding:
    """The first step of a sequence whose answers differ."""

    index: int
    api: str
    version: int
    paths: tuple[str, ...]
    kafka: Tree
    gregor: Tree

    @property
    def signature(self) -> tuple[str, tuple[str, ...]]:
        return self.api, self.paths

    def lines(self) -> list[str]:
        return [
            f"step {self.index}, {self.api} v{self.version}: {', '.join(self.paths)}",
            f"  kafka answer:  {self.kafka}",
            f"  gregor answer: {self.gregor}",
        ]


@dataclass
class Coverage:
    """What generated steps exercised, compared on both brokers."""

    steps: Counter[tuple[int, int]] = field(default_factory=Counter)
    errors: Counter[tuple[str, str, int]] = field(default_factory=Counter)  # (api, side, code)
    states: Counter[tuple[str, str]] = field(default_factory=Counter)  # (side, transaction state)
    sequences: int = 0
    findings: int = 0

    def count(self, step: Step, side: str, tree: Any) -> None:
        for name, value in _leaves(tree):
            if name.endswith("error_code") and isinstance(value, int):
                self.errors[(api_name(step.api_key), side, value)] += 1
            elif name == "transaction_state" and isinstance(value, str):
                self.states[(side, value)] += 1

    def summary(self) -> list[str]:
        """One line per API: steps per version; error codes as kafka/gregor answer counts (a code
        only one broker gave marked `!`); transaction states likewise."""
        out = [f"generated: {sum(self.steps.values())} steps in {self.sequences} sequences, "
               f"{self.findings} differing", "steps per API and version:"]
        for key in sorted({k for k, _v in self.steps}):
            versions = " ".join(f"v{v}:{n}" for (k, v), n in sorted(self.steps.items()) if k == key)
            out.append(f"  {api_name(key)} ({key}): {versions}")
        out.append("error codes per API, kafka/gregor answers (! only one broker gave it):")
        for api in sorted({a for a, _s, _c in self.errors}):
            codes = sorted({c for a, _s, c in self.errors if a == api})
            pairs = [self._pair(self.errors, (api, "kafka", c), (api, "gregor", c), c) for c in codes]
            out.append(f"  {api}: " + " ".join(pairs))
        states = sorted({s for _side, s in self.states})
        out.append("transaction states (Describe/ListTransactions), kafka/gregor: " + " ".join(
            self._pair(self.states, ("kafka", s), ("gregor", s), s or "<none>") for s in states))
        return out

    @staticmethod
    def _pair(counts: Counter[Any], kafka: Any, gregor: Any, label: object) -> str:
        k, g = counts[kafka], counts[gregor]
        return f"{label}={k}/{g}{'!' if (k == 0) != (g == 0) else ''}"


GENERATED = Coverage()  # the suite's generated steps, summarised by conftest.py at the end


def _leaves(tree: Any, name: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _leaves(v, k)
    elif isinstance(tree, list):
        for v in tree:
            yield from _leaves(v, name)
    else:
        yield name, tree


class Closed:
    """The answer of a broker that closed the connection (or sent nothing in time)."""

    def __init__(self, why: str) -> None:
        self.why = why

    def to_dict(self) -> Tree:
        return {"connection": self.why}


@dataclass
class Ports:
    kafka: int
    gregor: int


def _send(step: Step, side: Side, port: int) -> Any:
    try:
        return step.send(side)
    except (PeerClosed, TimeoutError, ConnectionError) as exc:
        side.client.close()
        side.client = WireClient(port)
        return Closed("closed" if isinstance(exc, PeerClosed | ConnectionError) else "no answer")


@contextmanager
def fresh_sides(ports: Ports) -> Iterator[tuple[Side, Side]]:
    """Connections to both brokers and a new topic name (so new transactional ids and groups)."""
    base = f"d-{uuid.uuid4().hex[:10]}"
    ts0 = (int(time.time()) - 3600) * 1000
    with WireClient(ports.kafka, timeout=20) as k, WireClient(ports.gregor, timeout=20) as g:
        yield Side("kafka", k, f"127.0.0.1:{ports.kafka}", vars={"t": base, "ts0": ts0}), Side(
            "gregor", g, f"127.0.0.1:{ports.gregor}", vars={"t": base, "ts0": ts0}
        )


def set_up(kafka: Side, gregor: Side) -> None:
    for suffix, partitions in TOPICS.items():
        configs = {"cleanup.policy": "compact"} if suffix == "-c" else None
        for step in new_topic(partitions, suffix, configs):
            for side in (kafka, gregor):
                step.send(side) if isinstance(step, Step) else step(side)


def play(actions: list[Act], ports: Ports, coverage: Coverage | None = None) -> Finding | None:
    """The sequence sent to both brokers, step by step; the first unaccepted difference, if any."""
    with fresh_sides(ports) as (kafka, gregor):
        set_up(kafka, gregor)
        for n, act in enumerate(actions):
            step = to_step(act)
            k_resp, g_resp = _send(step, kafka, ports.kafka), _send(step, gregor, ports.gregor)
            bad, k_tree, g_tree = unaccepted(step, kafka, gregor, k_resp, g_resp)
            if coverage is not None:
                _counted(coverage, step, k_tree, g_tree)
            if bad:
                paths = tuple(sorted({d.path for d in bad}))
                return Finding(n, api_name(step.api_key), step.at(), paths, k_tree, g_tree)
            time.sleep(pause_after(act))
            if act["op"] in TRANSACTIONAL and (stuck := _unsettled(kafka, gregor)):
                return Finding(n, "(completion)", 0, stuck, {"settling": settle(kafka, 0)},
                               {"settling": settle(gregor, 0)})
    return None


def _unsettled(kafka: Side, gregor: Side) -> tuple[str, ...]:
    """Which broker (if any) did not complete its transactions within the wait."""
    k, g = settle(kafka), settle(gregor)
    return tuple(f"{name} never completes" for name, stuck in (("kafka", k), ("gregor", g)) if stuck)


def _counted(coverage: Coverage, step: Step, k_tree: Tree, g_tree: Tree) -> None:
    coverage.steps[(step.api_key, step.at())] += 1
    COVERAGE[(step.api_key, step.at())] += 1
    coverage.count(step, "kafka", k_tree)
    coverage.count(step, "gregor", g_tree)


# -- shrinking ---------------------------------------------------------------------------------


def shrink(
    actions: list[Act], finding: Finding, ports: Ports, budget_s: float = 300.0
) -> tuple[list[Act], Finding]:
    """The shortest sequence found (within `budget_s`) whose answers still differ the same way:
    first cut after the differing step, then chunks of halving size removed, down to one action."""
    deadline = time.monotonic() + budget_s
    best, found = actions[: finding.index + 1], finding

    def differs(candidate: list[Act]) -> Finding | None:
        got = play(candidate, ports)
        return got if got is not None and got.signature == finding.signature else None

    chunk = max(1, len(best) // 2)
    while chunk >= 1 and time.monotonic() < deadline:
        best, found, removed = _remove_chunks(best, found, chunk, differs, deadline)
        if not removed:
            chunk //= 2
    return best, found


def _remove_chunks(
    best: list[Act],
    found: Finding,
    chunk: int,
    differs: Callable[[list[Act]], Finding | None],
    deadline: float,
) -> tuple[list[Act], Finding, bool]:
    start, removed = 0, False
    while start < len(best) and time.monotonic() < deadline:
        candidate = best[:start] + best[start + chunk :]
        got = differs(candidate) if candidate else None
        if got is not None:
            best, found, removed = candidate[: got.index + 1], got, True
        else:
            start += chunk
    return best, found, removed


# -- case files --------------------------------------------------------------------------------


def write_case(path: Path, actions: list[Act], finding: Finding, origin: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    case = {
        "origin": origin,
        "difference": {"step": finding.index, "api": finding.api, "version": finding.version,
                       "paths": list(finding.paths)},
        "kafka": finding.kafka,
        "gregor": finding.gregor,
        "actions": actions,
    }
    path.write_text(json.dumps(case, indent=1, default=str) + "\n")


def read_case(path: Path) -> list[Act]:
    actions: list[Act] = json.loads(path.read_text())["actions"]
    return actions


def sequences(
    seed: int, steps: int, length: int, left_out: frozenset[str] = frozenset()
) -> Iterator[tuple[str, list[Act]]]:
    """The run `seed` of `steps` steps: sequences of `length` actions, each seeded `seed/i`."""
    i = 0
    while steps > 0:
        origin = f"{seed}/{i}"
        yield origin, sequence(hash_seed(origin), min(length, steps), left_out)
        steps -= length
        i += 1


def hash_seed(origin: str) -> int:
    """A stable integer seed from a run seed and a sequence number (Python's str hash is salted)."""
    import hashlib

    return int.from_bytes(hashlib.sha256(origin.encode()).digest()[:8], "big")
