"""Back-to-back transactions through every client, on one broker and on the cluster.

EndTxn is answered once PrepareCommit is replicated; the transaction completes (markers,
CompleteCommit) afterwards, and a client's next request for the id arrives while it
does. Kafka answers it CONCURRENT_TRANSACTIONS (or, on a transaction version 2 Produce,
NOT_ENOUGH_REPLICAS) and the client backs off 20-100 ms; Gregor parks it until the
completion lands. Each client runs 300 transactions back to back: the brokers' own error
counters show neither error answered, and every transaction is committed exactly once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.cluster import running_cluster
from tests.integration.harness import BrokerProcess, free_port, started_broker, unique_topic
from tests.integration.test_metrics import scrape, total
from tests.integration.test_txn_clients import COMMITTED, KITS, UNCOMMITTED, confluent_consume, tid

pytestmark = pytest.mark.integration

TRANSACTIONS = 300
CLIENTS = ["confluent", "kafka-python", "aiokafka", "java-3.9", "java-4.3"]
BOUNCES = ("CONCURRENT_TRANSACTIONS", "NOT_ENOUGH_REPLICAS")
ERRORS = "kafka_network_requestmetrics_errors_total"
OVERRIDES = {"transaction.state.log.num.partitions": 3, "offsets.topic.num.partitions": 3}


@dataclass(frozen=True)
class Target:
    """One broker or the cluster: where clients connect, and the brokers to read counters of."""

    bootstrap: str
    brokers: list[BrokerProcess]
    replicas: int

    def counters(self) -> dict[str, float]:
        samples = [scrape(b) for b in self.brokers]
        return {error: sum(total(s, ERRORS, error=error) for s in samples) for error in BOUNCES}


def metrics(_: int = 0) -> dict[str, object]:
    return {"metrics.listener": f"http://127.0.0.1:{free_port()}"}


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    with started_broker(tmp_path_factory.mktemp("b2b-broker"), {**OVERRIDES, **metrics()}) as b:
        yield Target(b.bootstrap, [b], 1)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    base: Path = tmp_path_factory.mktemp("b2b-cluster")
    with running_cluster(base, show_logs_on_error=True, overrides=OVERRIDES, per_broker=metrics) as c:
        yield Target(c.bootstrap, c.brokers, 3)


@pytest.fixture(params=["single", "cluster"])
def target(request: pytest.FixtureRequest) -> Target:
    found: Target = request.getfixturevalue(request.param)
    return found


@pytest.mark.parametrize("client", CLIENTS)
def test_back_to_back_transactions_are_never_bounced(target: Target, client: str) -> None:
    topic = unique_topic(f"b2b-{client}")
    admin = AdminClient({"bootstrap.servers": target.bootstrap})
    admin.create_topics([NewTopic(topic, 1, target.replicas)], operation_timeout=20)[topic].result(30)
    kit = KITS[client](target.brokers[0])  # on the cluster, clients find the others by Metadata
    try:
        producer = kit.producer(tid(f"b2b-{client}"))
        producer.init()
        before = target.counters()
        for i in range(TRANSACTIONS):
            producer.begin()
            producer.send(topic, 0, f"t{i}-a")
            producer.send(topic, 0, f"t{i}-b")
            try:
                producer.commit()
            except Exception as e:  # the coordinators' word on a refused commit, for the record
                said = [ln for b in target.brokers for ln in b.log_text().splitlines() if "refused" in ln]
                raise AssertionError(f"commit of transaction {i}: {e}\n" + "\n".join(said[-5:])) from e
        after = target.counters()
    finally:
        kit.close()
    for error in BOUNCES:
        assert after[error] == before[error], f"{client} was answered {error}: {before} -> {after}"
    expected = [f"t{i}-{x}" for i in range(TRANSACTIONS) for x in "ab"]
    committed = [v for _, _, _, v in confluent_consume(target.bootstrap, [(topic, 0)], COMMITTED, 60)]
    assert committed == expected
    everything = [v for _, _, _, v in confluent_consume(target.bootstrap, [(topic, 0)], UNCOMMITTED, 60)]
    assert everything == expected  # no duplicate, no aborted attempt

