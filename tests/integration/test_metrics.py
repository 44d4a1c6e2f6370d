"""The Prometheus endpoint (`metrics.listener`) and the hanging-transaction check.

Scraped with a real HTTP client (urllib) and parsed with prometheus-client's own
parser, after real client traffic (confluent-kafka). Hanging transactions are made at
the byte level: a producer id no coordinator knows appends a transactional batch whose
timestamps lie two hours back, so it is older than transaction.max.timeout.ms plus
the margin at once, and no marker will ever come.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from coordinator.hashing import coordinator_partition
from protocol.messages import REQUESTS
from tests.integration import wire
from tests.integration.cluster import LAG_MS, Cluster
from tests.integration.harness import (
    BrokerFactory,
    BrokerProcess,
    free_port,
    started_broker,
    unique_topic,
    wait_until,
)

pytestmark = pytest.mark.integration

TWO_HOURS_MS = 2 * 3600 * 1000
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def metrics_config(**extra: object) -> dict[str, object]:
    """Hanging transactions are made by writes no coordinator checked: what brokers without
    KIP-890 verification let through, so these brokers run with it off."""
    return {
        "metrics.listener": f"http://127.0.0.1:{free_port()}",
        "transaction.partition.verification.enable": False,
        "transaction.max.timeout.ms": 60000,
        "transaction.hanging.margin.ms": 1000,
        "transaction.hanging.check.interval.ms": 200,
        "group.initial.rebalance.delay.ms": 0,
        **extra,
    }


@pytest.fixture(scope="module")
def mbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    config = metrics_config(**{"log.flush.interval.messages": 1})  # every append is flushed (and timed)
    with started_broker(tmp_path_factory.mktemp("metrics-broker"), config) as b:
        yield b


def url(broker: BrokerProcess, path: str = "/metrics") -> str:
    return str(broker.config["metrics.listener"]) + path


def scrape(broker: BrokerProcess) -> Samples:
    with urllib.request.urlopen(url(broker), timeout=10) as answer:
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith("text/plain; version=")
        text = answer.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text) for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    assert key in samples, f"no sample {name}{labels}"
    return samples[key]


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum over the samples of `name` whose labels include `labels`."""
    return sum(v for (n, ls), v in samples.items()
               if n == name and all((k, x) in ls for k, x in labels.items()))


def partition_offsets(samples: Samples, topic: str) -> tuple[float, float, float, float]:
    tp = {"topic": topic, "partition": "0"}
    return (value(samples, "kafka_log_log_logendoffset", **tp),
            value(samples, "kafka_log_log_highwatermark", **tp),
            value(samples, "kafka_log_log_laststableoffset", **tp),
            value(samples, "kafka_cluster_partition_laststableoffsetlag", **tp))


def list_offset(c: wire.WireClient, topic: str, isolation: int) -> int:
    cls = REQUESTS[2]
    part = cls.ListOffsetsTopic.ListOffsetsPartition
    req = cls(version=2, replica_id=-1, isolation_level=isolation, topics=[
        cls.ListOffsetsTopic(name=topic, partitions=[part(partition_index=0, timestamp=-1)])
    ])
    p = c.call(req, 2).topics[0].partitions[0]
    assert p.error_code == 0
    return int(p.offset)


def craft_hanging(broker: BrokerProcess, topic: str, partition: int = 0) -> int:
    """Offset 0 plain; 1-2 transactional from a producer id no coordinator knows, written
    two hours ago by their timestamps and never marked; 3 plain. Returns the producer id."""
    with wire.WireClient(broker.port) as c:
        c.metadata([topic], auto_create=True)
        resp = c.call(REQUESTS[22](version=1, transactional_id=None, transaction_timeout_ms=60000), 1)
        assert resp.error_code == 0
        old = int(time.time() * 1000) - TWO_HOURS_MS
        for batch in (
            wire.build_batch([b"before"]),
            wire.build_batch([b"h1", b"h2"], base_timestamp=old, producer_id=resp.producer_id,
                             producer_epoch=resp.producer_epoch, base_sequence=0, transactional=True),
            wire.build_batch([b"after"]),
        ):
            errors = wire.partition_errors(c.produce(topic, [(partition, batch)], version=7))
            assert errors == {partition: 0}
    return int(resp.producer_id)


# -- 1. requests, topics, partitions, groups after real client traffic ---------------------


def test_counts_after_real_produce_and_consume(mbroker: BrokerProcess) -> None:
    topic, group = unique_topic("metrics-plain"), unique_topic("metrics-group")
    before = scrape(mbroker)
    producer = Producer({"bootstrap.servers": mbroker.bootstrap, "linger.ms": 5})
    for i in range(20):
        producer.produce(topic, value=f"v{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": mbroker.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "fetch.wait.max.ms": 50})
    try:
        consumer.subscribe([topic])
        got = 0
        deadline = time.monotonic() + 30
        while got < 20 and time.monotonic() < deadline:
            m = consumer.poll(0.2)
            if m is not None and m.error() is None:
                got += 1
        assert got == 20
        during = scrape(mbroker)
    finally:
        consumer.close()

    assert value(during, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 20
    assert value(during, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic) > 20 * len(b"v0")
    assert value(during, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic) > 0
    assert value(during, "kafka_server_brokertopicmetrics_failedproducerequests_total", topic=topic) == 0
    assert partition_offsets(during, topic) == (20, 20, 20, 0)
    for api in ("Produce", "Fetch", "Metadata", "JoinGroup", "SyncGroup"):
        assert total(during, "kafka_network_requestmetrics_requests_total", request=api) > total(
            before, "kafka_network_requestmetrics_requests_total", request=api), api
        assert total(during, "kafka_network_requestmetrics_totaltimems_count", request=api) > 0
        assert total(during, "kafka_network_requestmetrics_requestqueuetimems_count", request=api) > 0
    errors = "kafka_network_requestmetrics_errors_total"
    assert total(during, errors, request="Produce", error="NONE") > total(before, errors, request="Produce",
                                                                         error="NONE")
    assert value(during, "kafka_coordinator_group_groupmetadatamanager_numgroups", state="Stable") >= 1
    assert value(during, "kafka_server_group_coordinator_metrics_group_rebalance_total") >= 1
    assert value(during, "gregor_coordinator_partition_load_time_ms_count", coordinator="group") >= 1
    assert value(during, "kafka_server_socket_server_metrics_connection_count") >= 2
    assert value(during, "kafka_server_socket_server_metrics_connection_creation_total") > value(
        before, "kafka_server_socket_server_metrics_connection_creation_total")
    assert value(during, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(during, "kafka_log_logflushstats_logflushrateandtimems_count") > value(
        before, "kafka_log_logflushstats_logflushrateandtimems_count")
    assert value(during, "kafka_controller_kafkacontroller_activecontrollercount") == 1


def test_errors_are_counted_by_code_and_topic(mbroker: BrokerProcess) -> None:
    """A batch with a bad CRC is refused: the error code and the topic's failures show it."""
    topic = unique_topic("metrics-corrupt")
    with wire.WireClient(mbroker.port) as c:
        c.metadata([topic], auto_create=True)
        before = scrape(mbroker)
        bad = wire.flip(wire.build_batch([b"x"]), wire.CRC_POS)
        assert wire.partition_errors(c.produce(topic, [(0, bad)], version=7)) == {0: 2}  # CORRUPT_MESSAGE
    after = scrape(mbroker)
    name = "kafka_network_requestmetrics_errors_total"
    code = {"request": "Produce", "error": "CORRUPT_MESSAGE"}
    assert total(after, name, **code) == total(before, name, **code) + 1
    assert value(after, "kafka_server_brokertopicmetrics_failedproducerequests_total", topic=topic) == 1
    assert total(after, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 0


def test_a_deleted_topics_counters_go(mbroker: BrokerProcess) -> None:
    topic = unique_topic("metrics-deleted")
    with wire.WireClient(mbroker.port) as c:
        c.metadata([topic], auto_create=True)
        assert wire.partition_errors(c.produce(topic, [(0, wire.build_batch([b"a", b"b"]))])) == {0: 0}
    assert value(scrape(mbroker), "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 2
    admin = AdminClient({"bootstrap.servers": mbroker.bootstrap})
    admin.delete_topics([topic], operation_timeout=20)[topic].result(30)
    samples = scrape(mbroker)
    assert total(samples, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 0
    assert total(samples, "kafka_log_log_logendoffset", topic=topic) == 0


# -- 2. a transaction: its state, the LSO lag while open, the completion --------------------


def test_open_transaction_state_lso_lag_and_commit(mbroker: BrokerProcess) -> None:
    topic = unique_topic("metrics-txn")
    producer = Producer({"bootstrap.servers": mbroker.bootstrap, "transactional.id": unique_topic("tid"),
                         "linger.ms": 0})
    producer.init_transactions(30)
    before = scrape(mbroker)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=f"t{i}".encode())
    assert producer.flush(30) == 0

    open_ = scrape(mbroker)
    assert value(open_, "gregor_transactions", state="Ongoing") >= 1
    assert value(open_, "gregor_transaction_oldest_age_ms", state="Ongoing") > 0
    assert partition_offsets(open_, topic) == (3, 3, 0, 3)  # LEO, HW, LSO, lag

    producer.commit_transaction(30)
    commits = "gregor_transaction_completed_total"
    committed = total(before, commits, result="commit")
    wait_until(lambda: total(scrape(mbroker), commits, result="commit") == committed + 1,
               msg="CompleteCommit counted")
    done = scrape(mbroker)
    assert partition_offsets(done, topic) == (4, 4, 4, 0)  # the COMMIT marker at 3
    ongoing = total(before, "gregor_transactions", state="Ongoing")
    assert value(done, "gregor_transactions", state="Ongoing") == ongoing
    assert value(done, "gregor_transaction_completion_time_ms_count", result="commit") >= 1
    assert value(done, "gregor_transaction_marker_send_time_ms_count") >= 1
    assert value(done, "gregor_coordinator_partition_load_time_ms_count", coordinator="transaction") >= 1
    assert total(done, "kafka_network_requestmetrics_requests_total", request="EndTxn") >= 1
    assert value(done, "kafka_server_replicamanager_produceridcount") >= 1


# -- 3. hanging transactions: found, reported, aborted -----------------------------------


def test_hanging_transaction_is_reported_with_the_abort_command(mbroker: BrokerProcess) -> None:
    topic = unique_topic("metrics-hanging")
    pid = craft_hanging(mbroker, topic)
    labels = {"topic": topic, "partition": "0", "producer_id": str(pid), "start_offset": "1"}
    wait_until(lambda: ("gregor_transaction_hanging", tuple(sorted(labels.items()))) in scrape(mbroker),
               msg="hanging transaction in the metrics")
    samples = scrape(mbroker)
    assert value(samples, "gregor_transaction_hanging_count") >= 1
    assert partition_offsets(samples, topic) == (4, 4, 1, 3)  # it holds the LSO at 1
    command = (f"gregor transactions --bootstrap-server {mbroker.bootstrap} abort --topic {topic} "
               f"--partition 0 --start-offset 1")
    lines = [line for line in mbroker.log_text().splitlines() if f"hanging transaction in {topic}-0" in line]
    assert len(lines) == 1, lines  # once, not at every check
    assert " WARNING " in lines[0] and f"producer id {pid} " in lines[0] and "start offset 1" in lines[0]
    assert lines[0].endswith(command)
    assert value(samples, "gregor_transaction_hanging_aborted_total") == 0  # auto-abort is off


def test_recent_or_coordinated_transactions_are_not_hanging(mbroker: BrokerProcess) -> None:
    """An open transaction its coordinator knows, however old the check finds it, and a
    fresh unknown one are not reported."""
    topic = unique_topic("metrics-not-hanging")
    producer = Producer({"bootstrap.servers": mbroker.bootstrap, "transactional.id": unique_topic("tid")})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"open", timestamp=int(time.time() * 1000) - TWO_HOURS_MS)
    assert producer.flush(30) == 0
    checks = value(scrape(mbroker), "gregor_transaction_hanging_checks_total")
    wait_until(lambda: value(scrape(mbroker), "gregor_transaction_hanging_checks_total") >= checks + 2)
    samples = scrape(mbroker)
    assert total(samples, "gregor_transaction_hanging", topic=topic) == 0
    assert f"hanging transaction in {topic}-0" not in mbroker.log_text()
    producer.abort_transaction(30)


def test_hanging_transaction_auto_abort_lets_the_lso_catch_up(broker_factory: BrokerFactory) -> None:
    b = broker_factory(metrics_config(**{"transaction.hanging.auto.abort.enable": True}))
    topic = unique_topic("metrics-auto-abort")
    pid = craft_hanging(b, topic)
    with wire.WireClient(b.port) as c:
        wait_until(lambda: list_offset(c, topic, READ_COMMITTED) == 5, msg="LSO past the ABORT marker at 4")
        assert list_offset(c, topic, READ_UNCOMMITTED) == 5
    samples = scrape(b)
    assert value(samples, "gregor_transaction_hanging_aborted_total") == 1
    assert partition_offsets(samples, topic) == (5, 5, 5, 0)
    log = b.log_text()
    assert f"hanging transaction in {topic}-0: producer id {pid} " in log
    aborted = [line for line in log.splitlines() if f"aborted hanging transaction in {topic}-0" in line]
    assert len(aborted) == 1 and f"producer id {pid} " in aborted[0]


# -- 4. the endpoint itself ----------------------------------------------------------------


def test_endpoint_answers_only_get_metrics(mbroker: BrokerProcess) -> None:
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(url(mbroker, "/nothing"), timeout=10)
    assert info.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(urllib.request.Request(url(mbroker), data=b"x", method="POST"), timeout=10)
    assert info.value.code == 405
    with wire.WireClient(int(str(mbroker.config["metrics.listener"]).rsplit(":", 1)[1])) as raw:
        raw.send_raw(b"\x00\x01garbage\r\n\r\n")
        assert raw.recv_exact(12) == b"HTTP/1.1 400"
    assert "process_cpu_seconds_total" in {name for name, _ in scrape(mbroker)}


def test_metrics_port_in_use_stops_start_up(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    taken = broker_factory(metrics_config())
    clash = broker_factory({"metrics.listener": taken.config["metrics.listener"]}, start=False)
    with pytest.raises(Exception, match=r"\(metrics.listener\): address already in use"):
        clash.start()


# -- 5. a cluster: controller, ISR changes, coordinators on another broker --------------------


def test_cluster_controller_isr_changes_and_remote_coordinators(tmp_path: Path) -> None:
    """Two brokers: one active controller between them; a hanging-transaction check asks
    the coordinator on the other broker (a transaction it knows is not hanging, one it
    does not know is); a paused follower's ISR shrink and expansion are counted on the
    leader."""
    cluster = Cluster(tmp_path, size=2, overrides={
        "default.replication.factor": 2, "min.insync.replicas": 1, "offsets.topic.replication.factor": 2,
        "transaction.state.log.replication.factor": 2, "transaction.state.log.min.isr": 1,
        "transaction.state.log.num.partitions": 4, "offsets.topic.num.partitions": 4,
        **{k: v for k, v in metrics_config().items() if k != "metrics.listener"},
    }, per_broker=lambda _n: {"metrics.listener": f"http://127.0.0.1:{free_port()}"})
    try:
        wait_until(lambda: sum(value(scrape(b), "kafka_controller_kafkacontroller_activecontrollercount")
                               for b in cluster.brokers) == 1, msg="one active controller")
        tid = unique_topic("tid")
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid})
        producer.init_transactions(30)
        coordinator = cluster.partition("__transaction_state", coordinator_partition(tid, 4)).leader
        topic = unique_topic("metrics-cluster")
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(topic, 2, 2)], operation_timeout=20)[topic].result(30)
        image = cluster.wait_for(lambda i: all(
            (topic, p) in i.partitions and len(i.partitions[(topic, p)].isr) == 2 for p in (0, 1)))
        index = next(p for p in (0, 1) if image.partitions[(topic, p)].leader != coordinator)
        leader = cluster.broker(image.partitions[(topic, index)].leader)
        follower = cluster.broker(coordinator)

        producer.begin_transaction()
        old = int(time.time() * 1000) - TWO_HOURS_MS
        producer.produce(topic, value=b"open", partition=index, timestamp=old)
        assert producer.flush(30) == 0
        hanging_pid = craft_hanging(leader, topic, index)
        wait_until(lambda: total(scrape(leader), "gregor_transaction_hanging", topic=topic) > 0,
                   msg="the unknown producer's transaction is hanging")
        found = [dict(labels) for (name, labels), v in scrape(leader).items()
                 if name == "gregor_transaction_hanging" and ("topic", topic) in labels]
        assert [f["producer_id"] for f in found] == [str(hanging_pid)]  # not the coordinated one
        producer.abort_transaction(30)

        follower.pause()
        try:
            cluster.wait_for(lambda i: follower.node_id not in i.partitions[(topic, index)].isr,
                             LAG_MS / 1000 * 5)
            wait_until(lambda: value(scrape(leader), "kafka_server_replicamanager_isrshrinks_total") >= 1)
            assert value(scrape(leader), "kafka_server_replicamanager_underreplicatedpartitions") >= 1
        finally:
            follower.resume()
        cluster.wait_for(lambda i: len(i.partitions[(topic, index)].isr) == 2, 30)
        wait_until(lambda: value(scrape(leader), "kafka_server_replicamanager_isrexpands_total") >= 1)
        samples = scrape(leader)
        assert value(samples, "gregor_controller_epoch") >= 1
    finally:
        cluster.close()
