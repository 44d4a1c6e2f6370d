"""One Apache Kafka node and one Gregor broker for the whole differential suite, and the
closing table: every API key Gregor advertises, its versions, and the cases that exercised it
(a key at 0 cases fails a run of the whole suite)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.differential.generated.play import GENERATED
from tests.differential.runner import COVERAGE, Side, advertised, api_name
from tests.integration.harness import BrokerProcess, started_broker
from tests.integration.kafka import KafkaNode, started_kafka
from tests.integration.wire import WireClient

# The same settings on both: one partition per internal topic, no initial rebalance delay.
SHARED = {
    "offsets.topic.num.partitions": 1,
    "transaction.state.log.num.partitions": 1,
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,  # the EOS processor's session is 2 s
    "group.consumer.assignment.interval.ms": 0,  # each group epoch's target at once (KIP-1263)
    "auto.create.topics.enable": True,
    "num.partitions": 1,
    # No periodic retention pass in a run: each broker's comes at its own moment, so a topic a
    # sequence gave a short retention.ms lost its old records on one broker and not yet on the
    # other (seed 11 of the generated sequences, a log start offset 2 against 0)
    "log.retention.check.interval.ms": 86400000,
}
GROUP, TXN = 0, 1  # FindCoordinator key types


@dataclass(frozen=True)
class Pair:
    kafka: KafkaNode
    gregor: BrokerProcess


@contextmanager
def started_pair(kafka_dir: Path, gregor_dir: Path) -> Iterator[Pair]:
    """Kafka and Gregor with the shared settings, both coordinators and producer ids ready."""
    with started_kafka(kafka_dir, SHARED) as kafka, started_broker(gregor_dir, SHARED) as gregor:
        for port in (kafka.port, gregor.port):
            _warm_coordinators(port)
            _warm_producer_ids(port)
        yield Pair(kafka, gregor)


@pytest.fixture(scope="package")  # stopped after the last differential test, not at session end
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    with started_pair(tmp_path_factory.mktemp("kafka"), tmp_path_factory.mktemp("gregor")) as both:
        yield both


def _warm_coordinators(port: int, timeout: float = 30.0) -> None:
    """Wait until the group and transaction coordinators answer (Kafka creates its internal
    topics on the first FindCoordinator and answers COORDINATOR_NOT_AVAILABLE meanwhile)."""
    from tests.differential.messages import build

    deadline = time.monotonic() + timeout
    with WireClient(port) as c:
        for key_type in (GROUP, TXN):
            while True:
                req = build(10, 4, {"key_type": key_type, "coordinator_keys": ["warm-up"]})
                if c.call(req, 4).coordinators[0].error_code == 0:
                    break
                assert time.monotonic() < deadline, f"no coordinator of key type {key_type} on {port}"
                time.sleep(0.1)


def _warm_producer_ids(port: int, timeout: float = 30.0) -> None:
    """Wait until InitProducerId answers (Kafka's broker asks its controller for a block of
    producer ids on the first one and answers COORDINATOR_LOAD_IN_PROGRESS meanwhile)."""
    from tests.differential.messages import build

    deadline = time.monotonic() + timeout
    with WireClient(port) as c:
        req = build(
            22,
            4,
            {
                "transactional_id": None,
                "transaction_timeout_ms": 60000,
                "producer_id": -1,
                "producer_epoch": -1,
            },
        )
        while c.call(req, 4).error_code != 0:
            assert time.monotonic() < deadline, f"no producer id from {port}"
            time.sleep(0.1)


@pytest.fixture
def sides(pair: Pair) -> Iterator[tuple[Side, Side]]:
    """Fresh connections to both brokers; `vars["t"]` is a topic name unique to the case."""
    topic = f"d-{uuid.uuid4().hex[:10]}"
    with WireClient(pair.kafka.port) as k, WireClient(pair.gregor.port) as g:
        kafka = Side("kafka", k, pair.kafka.bootstrap, vars={"t": topic})
        gregor = Side("gregor", g, pair.gregor.bootstrap, vars={"t": topic})
        yield kafka, gregor


def coverage_rows() -> list[tuple[int, str, str, str, int]]:
    rows = []
    for key, (low, high) in advertised().items():
        seen = sorted(v for (k, v) in COVERAGE if k == key)
        missing = [v for v in range(low, high + 1) if v not in seen]
        cases = sum(n for (k, _v), n in COVERAGE.items() if k == key)
        rows.append((key, api_name(key), f"{low}-{high}", ",".join(map(str, missing)) or "-", cases))
    return rows


COLLECTED: set[Path] = set()  # the differential test modules this session collected


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    ours = [i for i in items if Path(str(i.fspath)).parent == here]
    for item in ours:
        item.add_marker(pytest.mark.integration)  # real Kafka and Gregor processes
    COLLECTED.update(Path(str(i.fspath)) for i in ours)


def _whole_suite(config: pytest.Config) -> bool:
    """The whole corpus ran (every module, no -k or -m): only then is a key at 0 cases a failure."""
    every = set(Path(__file__).parent.glob("test_*.py"))
    return bool(COVERAGE) and every <= COLLECTED and not config.option.keyword and not config.option.markexpr


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # type: ignore[no-untyped-def]
    if not COVERAGE:
        return
    tr = terminalreporter
    if GENERATED.sequences:
        tr.section("differential coverage: generated sequences")
        for line in GENERATED.summary():
            tr.write_line(line)
    tr.section("differential coverage: API keys Gregor advertises")
    tr.write_line(f"{'key':>4}  {'API':<28} {'versions':<9} {'versions not exercised':<24} cases")
    for key, name, versions, missing, cases in coverage_rows():
        tr.write_line(f"{key:>4}  {name:<28} {versions:<9} {missing:<24} {cases}")
    zero = [name for _k, name, _v, _m, cases in coverage_rows() if cases == 0]
    if zero and _whole_suite(config):
        tr.write_line(f"FAILED: no differential case exercised {', '.join(zero)}", red=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _whole_suite(session.config) and any(r[4] == 0 for r in coverage_rows()):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
