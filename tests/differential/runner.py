"""A differential case: the same steps sent to Kafka and to Gregor, each answer normalised and
compared; the (API key, version) of every compared step is counted for the closing table."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from broker.handlers import HANDLER_TABLE
from protocol.messages import REQUESTS
from tests.differential.compare import Difference, Renamer, accepted, differences, normalise
from tests.differential.messages import as_tree, build
from tests.integration.wire import WireClient

# (api key, version) -> compared steps; printed by conftest.py at the end of the session.
COVERAGE: Counter[tuple[int, int]] = Counter()
# Kafka 4.x no longer serves some old versions Gregor still does (KIP-896): a step at such a
# version goes to Kafka at Kafka's lowest version and the fields both answers have are compared.
KAFKA_MIN_VERSION = {0: 3, 2: 1, 8: 2, 9: 1, 19: 2, 20: 1, 23: 2, 27: 1, 32: 1, 35: 1}


def advertised() -> dict[int, tuple[int, int]]:
    """Every API key Gregor advertises in ApiVersions and its (min, max) version."""
    return {k: (h.min_version, h.advertised_max) for k, h in sorted(HANDLER_TABLE.items())}


def api_name(api_key: int) -> str:
    return str(REQUESTS[api_key].name).removesuffix("Request")


@dataclass
class Side:
    """One broker's state during a case: its connection, the ids it made up, what steps learnt."""

    name: str
    client: WireClient
    bootstrap: str
    rename: Renamer = field(default_factory=Renamer)
    vars: dict[str, Any] = field(default_factory=dict)


Tree = dict[str, Any]
Builder = Callable[[Side], Tree]


@dataclass
class Step:
    api_key: int
    request: Tree | Builder
    version: int | None = None  # None: the highest Gregor advertises
    learn: Callable[[Side, Any], None] | None = None
    compare: bool = True
    fields: tuple[str, ...] = ()  # compare only these top-level fields (all when empty)
    # Keep only what concerns the case of an answer that lists the whole broker (ListGroups).
    select: Callable[[Side, Tree], Tree] | None = None

    def at(self) -> int:
        return advertised()[self.api_key][1] if self.version is None else self.version

    def send(self, side: Side) -> Any:
        version = self.at()
        if side.name == "kafka":
            version = max(version, KAFKA_MIN_VERSION.get(self.api_key, 0))
        tree = self.request(side) if callable(self.request) else self.request
        msg = build(self.api_key, version, tree)
        resp = side.client.call(msg, version)
        if self.learn is not None:
            self.learn(side, resp)
        return resp


class CaseFailure(AssertionError):
    pass


def unaccepted(
    step: Step, kafka: Side, gregor: Side, k_resp: Any, g_resp: Any
) -> tuple[list[Difference], Tree, Tree]:
    """The differences of one step's answers no accepted row names, and both normalised answers."""
    k_raw, g_raw = as_tree(k_resp), as_tree(g_resp)
    if step.select is not None:
        k_raw, g_raw = step.select(kafka, k_raw), step.select(gregor, g_raw)
    k_tree, g_tree = normalise(k_raw, kafka.rename), normalise(g_raw, gregor.rename)
    if step.fields:
        k_tree = {f: k_tree.get(f) for f in step.fields}
        g_tree = {f: g_tree.get(f) for f in step.fields}
    common_only = step.at() < KAFKA_MIN_VERSION.get(step.api_key, 0)
    found: list[Difference] = differences(k_tree, g_tree, common_only=common_only)
    return [d for d in found if not accepted(api_name(step.api_key), step.at(), d)], k_tree, g_tree


def compare_step(step: Step, kafka: Side, gregor: Side, k_resp: Any, g_resp: Any, n: int = 0) -> list[str]:
    """The unaccepted differences of one step's answers (empty when they agree)."""
    bad, k_tree, g_tree = unaccepted(step, kafka, gregor, k_resp, g_resp)
    if not bad:
        return []
    return [
        f"step {n}, {api_name(step.api_key)} v{step.at()}:",
        *(f"  {d}" for d in bad),
        f"  kafka answer:  {k_tree}",
        f"  gregor answer: {g_tree}",
    ]


Action = Callable[[Side], None]  # done on each broker in turn, nothing compared (set-up, waits)


def run_case(steps: list[Step | Action], kafka: Side, gregor: Side) -> None:
    problems: list[str] = []
    exercised: set[tuple[int, int]] = set()
    for n, step in enumerate(steps):
        if not isinstance(step, Step):
            step(kafka)
            step(gregor)
            continue
        k_resp, g_resp = step.send(kafka), step.send(gregor)
        if not step.compare:
            continue
        problems += compare_step(step, kafka, gregor, k_resp, g_resp, n)
        exercised.add((step.api_key, step.at()))
    COVERAGE.update(exercised)
    if problems:
        raise CaseFailure("Kafka and Gregor answer differently:\n" + "\n".join(problems))
