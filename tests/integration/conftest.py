"""Fixtures that start real Gregor brokers for integration tests.

- `broker_factory`: function-scoped; `broker_factory(overrides={...})` starts a
  broker with config overrides; all are killed at teardown.
- `broker`: a fresh broker for one test (use for tests that crash/restart it).
- `module_broker`: one broker shared by a module; tests on it must use their
  own topic names (`harness.unique_topic`).
- `etcd`: one etcd server shared by a module (cluster tests use their own key roots).

On failure the tail of every broker log the test touched is attached to the
report.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.etcd import EtcdProcess
from tests.integration.harness import REPO_ROOT, BrokerFactory, BrokerProcess, started_broker


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[BrokerFactory]:
    factory = BrokerFactory(tmp_path)
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerProcess:
    return broker_factory()


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with started_broker(tmp_path_factory.mktemp("module-broker")) as b:
        yield b


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdProcess]:
    """One etcd server for a module's cluster tests (each test uses its own key root)."""
    server = EtcdProcess(tmp_path_factory.mktemp("etcd") / "data").start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def bootstrap(module_broker: BrokerProcess) -> str:
    return module_broker.bootstrap


def _brokers_of(item: pytest.Item) -> list[BrokerProcess]:
    found: list[BrokerProcess] = []
    for value in getattr(item, "funcargs", {}).values():
        if isinstance(value, BrokerProcess):
            found.append(value)
        elif isinstance(value, BrokerFactory):
            found.extend(value.brokers)
    return found


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    report = yield
    if report.failed:
        for b in dict.fromkeys(_brokers_of(item)):
            report.sections.append((f"broker log {b.bootstrap}", b.log_tail(150)))
    return report


@pytest.fixture(scope="session")
def spark():  # type: ignore[no-untyped-def]
    """One local SparkSession for every Spark test (local[2,3]: a failed task is retried,
    up to 3 attempts), with the gregor_kafka data source registered."""
    from gregor_spark.session import local_session

    # Spark's own Kafka connector too (test_spark_builtin.py), when `make spark-kafka-deps` put it there.
    jars = sorted(str(j) for j in (REPO_ROOT / ".deps" / "spark-kafka").glob("*.jar"))
    extra = {"spark.jars": ",".join(jars)} if jars else {}
    session = local_session("local[2,3]", app="gregor-tests", **extra)
    try:
        yield session
    finally:
        session.stop()
