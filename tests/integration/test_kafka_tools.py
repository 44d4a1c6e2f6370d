"""Apache Kafka's own command-line tools (4.4.0, from .deps/kafka-4.4, each run by the main class
its bin/ script runs) against a Gregor broker: topics, configs, console producer and consumer,
consumer groups, offsets, records, log dirs, API versions, features, cluster id, elections,
reassignments, the perf tools with transactions, kafka-transactions, and kafka-dump-log on
Gregor's own segment, index, snapshot and transaction-index files.

A JVM starts slowly, so each test runs a whole session of one family of tools on one topic."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.harness import BrokerProcess, started_broker, unique_topic
from tests.integration.kafka import kafka_tool

TOPICS = "org.apache.kafka.tools.TopicCommand"
CONFIGS = "org.apache.kafka.tools.ConfigCommand"  # kafka.admin.ConfigCommand until Kafka 4.4
PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
GET_OFFSETS = "org.apache.kafka.tools.GetOffsetShell"
DELETE_RECORDS = "org.apache.kafka.tools.DeleteRecordsCommand"
LOG_DIRS = "org.apache.kafka.tools.LogDirsCommand"
API_VERSIONS = "org.apache.kafka.tools.BrokerApiVersionsCommand"
FEATURES = "org.apache.kafka.tools.FeatureCommand"
CLUSTER = "org.apache.kafka.tools.ClusterTool"
ELECTION = "org.apache.kafka.tools.LeaderElectionCommand"
REASSIGN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
PRODUCER_PERF = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERF = "org.apache.kafka.tools.ConsumerPerformance"
TRANSACTIONS = "org.apache.kafka.tools.TransactionsCommand"
DUMP_LOG = "org.apache.kafka.tools.DumpLogSegments"


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the module; a console consumer's group forms at once."""
    with started_broker(tmp_path_factory.mktemp("kafka-tools"), {"group.initial.rebalance.delay.ms": 0}) as b:
        yield b


def run(b: BrokerProcess, main_class: str, *args: str, stdin: str | None = None) -> str:
    """The tool's stdout; it must exit 0 (its stderr is shown otherwise)."""
    done = kafka_tool(main_class, "--bootstrap-server", b.bootstrap, *args, stdin=stdin)
    return _ok(done, main_class, args)


def _ok(done: subprocess.CompletedProcess[str], main_class: str, args: tuple[str, ...]) -> str:
    name = main_class.rsplit(".", 1)[-1]
    assert done.returncode == 0, (
        f"{name} {' '.join(args)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    )
    return done.stdout


def test_topics_and_configs(module_broker: BrokerProcess) -> None:
    b, topic = module_broker, unique_topic("kt-topics")
    run(
        b,
        TOPICS,
        "--create",
        "--topic",
        topic,
        "--partitions",
        "2",
        "--replication-factor",
        "1",
        "--config",
        "retention.ms=3600000",
    )
    assert topic in run(b, TOPICS, "--list").split()
    described = run(b, TOPICS, "--describe", "--topic", topic)
    assert "PartitionCount: 2" in described and "retention.ms=3600000" in described, described
    run(b, TOPICS, "--alter", "--topic", topic, "--partitions", "3")
    assert "PartitionCount: 3" in run(b, TOPICS, "--describe", "--topic", topic)

    topic_entity = ["--entity-type", "topics", "--entity-name", topic]
    run(b, CONFIGS, *topic_entity, "--alter", "--add-config", "cleanup.policy=compact,segment.ms=600000")
    shown = run(b, CONFIGS, *topic_entity, "--describe")
    assert "cleanup.policy=compact" in shown and "segment.ms=600000" in shown, shown
    run(b, CONFIGS, *topic_entity, "--alter", "--delete-config", "segment.ms")
    every = run(b, CONFIGS, *topic_entity, "--describe", "--all")
    assert "segment.ms=604800000" in every and "cleanup.policy=compact" in every, every

    broker = ["--entity-type", "brokers", "--entity-name", "1"]
    assert "log.retention.ms=" in run(b, CONFIGS, *broker, "--describe", "--all")
    run(b, CONFIGS, *broker, "--alter", "--add-config", "log.retention.ms=86400000")
    assert (
        "log.retention.ms=86400000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.retention.ms=86400000"
        in run(b, CONFIGS, *broker, "--describe")
    )
    run(
        b,
        CONFIGS,
        "--entity-type",
        "brokers",
        "--entity-default",
        "--alter",
        "--add-config",
        "log.retention.ms=172800000",
    )
    assert "log.retention.ms=172800000" in run(
        b, CONFIGS, "--entity-type", "brokers", "--entity-default", "--describe"
    )
    # Keys Kafka updates at run time that Gregor stores but does not use.
    run(
        b,
        CONFIGS,
        *broker,
        "--alter",
        "--add-config",
        "log.cleaner.threads=2,sasl.kerberos.min.time.before.relogin=60001",
    )
    run(
        b,
        CONFIGS,
        "--entity-type",
        "brokers",
        "--entity-default",
        "--alter",
        "--add-config",
        "log.cleaner.threads=2",
    )
    assert (
        "log.cleaner.threads=2 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.cleaner.threads=2, "
        "DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleaner.threads=2, DEFAULT_CONFIG:log.cleaner.threads=1}"
        in run(b, CONFIGS, *broker, "--describe", "--all")
    )
    run(
        b,
        CONFIGS,
        *broker,
        "--alter",
        "--delete-config",
        "log.cleaner.threads,sasl.kerberos.min.time.before.relogin",
    )
    run(
        b,
        CONFIGS,
        "--entity-type",
        "brokers",
        "--entity-default",
        "--alter",
        "--delete-config",
        "log.cleaner.threads",
    )
    run(b, CONFIGS, *broker, "--alter", "--delete-config", "log.retention.ms")
    run(
        b,
        CONFIGS,
        "--entity-type",
        "brokers",
        "--entity-default",
        "--alter",
        "--delete-config",
        "log.retention.ms",
    )
    run(b, TOPICS, "--delete", "--topic", topic)
    assert topic not in run(b, TOPICS, "--list").split()


def test_console_groups_offsets_records(module_broker: BrokerProcess, tmp_path: Path) -> None:
    b, topic, group = module_broker, unique_topic("kt-console"), unique_topic("kt-group")
    run(b, TOPICS, "--create", "--topic", topic, "--partitions", "1", "--replication-factor", "1")
    lines = "".join(f"k{i}:v{i}\n" for i in range(10))
    run(
        b,
        PRODUCER,
        "--topic",
        topic,
        "--reader-property",
        "parse.key=true",
        "--reader-property",
        "key.separator=:",
        stdin=lines,
    )
    got = run(
        b,
        CONSUMER,
        "--topic",
        topic,
        "--group",
        group,
        "--from-beginning",
        "--max-messages",
        "10",
        "--formatter-property",
        "print.key=true",
        "--formatter-property",
        "key.separator=:",
        "--timeout-ms",
        "20000",
    )
    assert got.splitlines() == lines.splitlines()

    assert group in run(b, GROUPS, "--list").split()
    described = run(b, GROUPS, "--describe", "--group", group)
    assert re.search(rf"{group}\s+{topic}\s+0\s+10\s+10\s+0", described), described
    reset = run(
        b, GROUPS, "--reset-offsets", "--group", group, "--topic", topic, "--to-offset", "4", "--execute"
    )
    assert re.search(rf"{group}\s+{topic}\s+0\s+4", reset), reset
    assert re.search(rf"{topic}\s+0\s+4\s+10\s+6", run(b, GROUPS, "--describe", "--group", group))
    assert f"('{group}') was successful" in run(b, GROUPS, "--delete", "--group", group)

    assert run(b, GET_OFFSETS, "--topic", topic).split() == [f"{topic}:0:10"]
    assert run(b, GET_OFFSETS, "--topic", topic, "--time", "-2").split() == [f"{topic}:0:0"]
    plan = tmp_path / "delete.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "offset": 3}]}))
    deleted = run(b, DELETE_RECORDS, "--offset-json-file", str(plan))
    assert "low_watermark: 3" in deleted, deleted
    assert run(b, GET_OFFSETS, "--topic", topic, "--time", "-2").split() == [f"{topic}:0:3"]

    dirs = run(b, LOG_DIRS, "--describe", "--topic-list", topic)
    report = json.loads(dirs.strip().splitlines()[-1])
    partitions = [p for d in report["brokers"][0]["logDirs"] for p in d["partitions"]]
    assert [p["partition"] for p in partitions] == [f"{topic}-0"], report


def test_cluster_tools(module_broker: BrokerProcess, tmp_path: Path) -> None:
    b, topic = module_broker, unique_topic("kt-cluster")
    versions = run(b, API_VERSIONS)
    assert "Produce(0): 3 to 13 [usable: 13]" in versions and "EndTxn(26)" in versions, versions
    features = run(b, FEATURES, "describe")
    assert "Feature: transaction.version" in features, features
    cluster_id = _ok(
        kafka_tool(CLUSTER, "cluster-id", "--bootstrap-server", b.bootstrap), CLUSTER, ()
    ).strip()
    assert re.fullmatch(r"Cluster ID: [A-Za-z0-9_-]{22}", cluster_id), cluster_id

    run(b, TOPICS, "--create", "--topic", topic, "--partitions", "2", "--replication-factor", "1")
    elected = run(b, ELECTION, "--election-type", "PREFERRED", "--topic", topic, "--partition", "0")
    assert "Valid replica already elected for partitions" in elected, elected
    plan = tmp_path / "reassign.json"
    plan.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [
                    {"topic": topic, "partition": p, "replicas": [1], "log_dirs": ["any"]} for p in (0, 1)
                ],
            }
        )
    )
    run(b, REASSIGN, "--reassignment-json-file", str(plan), "--execute")
    verified = run(b, REASSIGN, "--reassignment-json-file", str(plan), "--verify")
    assert f"Reassignment of partition {topic}-0 is completed" in verified, verified


def test_perf_tools_and_transactions(module_broker: BrokerProcess) -> None:
    b, topic, txn = module_broker, unique_topic("kt-perf"), unique_topic("kt-txn")
    run(b, TOPICS, "--create", "--topic", topic, "--partitions", "2", "--replication-factor", "1")
    produced = kafka_tool(
        PRODUCER_PERF,
        "--topic",
        topic,
        "--num-records",
        "2000",
        "--record-size",
        "100",
        "--throughput",
        "-1",
        "--transactional-id",
        txn,
        "--transaction-duration-ms",
        "200",
        "--producer-props",
        f"bootstrap.servers={b.bootstrap}",
    )
    out = _ok(produced, PRODUCER_PERF, ())
    assert "2000 records sent" in out, out
    consumed = run(
        b,
        CONSUMER_PERF,
        "--topic",
        topic,
        "--messages",
        "2000",
        "--timeout",
        "30000",
        "--consumer.config",
        "/dev/null",
    )
    assert "2000" in consumed.splitlines()[-1], consumed

    listed = run(b, TRANSACTIONS, "list")
    assert re.search(rf"{txn}\s+\d+\s+\d+\s+CompleteCommit", listed), listed
    described = run(b, TRANSACTIONS, "describe", "--transactional-id", txn)
    assert "CompleteCommit" in described, described
    producers = run(b, TRANSACTIONS, "describe-producers", "--topic", topic, "--partition", "0")
    assert "ProducerId" in producers and len(producers.splitlines()) == 2, producers
    hanging = run(b, TRANSACTIONS, "find-hanging", "--broker-id", "1")
    assert (
        hanging.splitlines()[0].startswith("Topic\tPartition\tProducerId") and len(hanging.splitlines()) == 1
    )


def _transactions(bootstrap: str, topic: str, count: int, commit_every: int = 2) -> None:
    """`count` transactions of 20 records on partition 0; every `commit_every`-th one aborted."""
    from confluent_kafka import Producer

    p = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": unique_topic("kt-dump-tx"), "linger.ms": 5}
    )
    p.init_transactions(30)
    for n in range(count):
        p.begin_transaction()
        for i in range(20):
            p.produce(topic, value=b"x" * 200, key=b"k%d" % i, partition=0)
        p.flush(30)
        if n % commit_every == 1:
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)


def test_transactions_abort(module_broker: BrokerProcess) -> None:
    from confluent_kafka import Producer

    b, topic = module_broker, unique_topic("kt-abort")
    run(b, TOPICS, "--create", "--topic", topic, "--partitions", "1", "--replication-factor", "1")
    p = Producer(
        {"bootstrap.servers": b.bootstrap, "transactional.id": unique_topic("kt-open"), "linger.ms": 0}
    )
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"left open", partition=0)
    p.flush(30)  # the transaction stays open: its producer never ends it
    before = run(b, TRANSACTIONS, "describe-producers", "--topic", topic, "--partition", "0")
    assert _open_transaction_starts(before) == ["0"], before
    run(b, TRANSACTIONS, "abort", "--topic", topic, "--partition", "0", "--start-offset", "0")
    after = run(b, TRANSACTIONS, "describe-producers", "--topic", topic, "--partition", "0")
    assert _open_transaction_starts(after) == [], after
    assert run(b, GET_OFFSETS, "--topic", topic).split() == [f"{topic}:0:2"]  # the record and the marker


def _open_transaction_starts(described: str) -> list[str]:
    """The CurrentTransactionStartOffset of every producer of a describe-producers table that has one."""
    rows = [line.split() for line in described.splitlines()[1:] if line.strip()]
    return [row[5] for row in rows if row[5] != "None"]


def test_dump_log_reads_gregor_files(module_broker: BrokerProcess) -> None:
    b, topic = module_broker, unique_topic("kt-dump")
    # Kafka's tools refuse segments under 1 MiB (Kafka 4): the topic is made with the Python admin.
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"segment.bytes": "16384"})])[topic].result(30)
    _transactions(b.bootstrap, topic, 8)
    files = sorted(
        p
        for p in b.partition_dir(topic).iterdir()
        if p.suffix in (".log", ".index", ".timeindex", ".snapshot", ".txnindex")
    )
    kinds = {p.suffix for p in files}
    assert kinds == {".log", ".index", ".timeindex", ".snapshot", ".txnindex"}, files
    sealed = [str(p) for p in files if p.suffix in (".log", ".index", ".timeindex", ".txnindex", ".snapshot")]
    dumped = _ok(
        kafka_tool(DUMP_LOG, "--files", ",".join(sealed), "--print-data-log", "--deep-iteration"),
        DUMP_LOG,
        (),
    )
    assert "endTxnMarker: ABORT" in dumped and "endTxnMarker: COMMIT" in dumped, dumped[-3000:]
    assert "producerId:" in dumped and "isTransactional: true" in dumped, dumped[-3000:]
    assert "Mismatch" not in dumped and "Exception" not in dumped, dumped[-3000:]
    indexes = [str(p) for p in files if p.suffix in (".index", ".timeindex")]
    verified = _ok(kafka_tool(DUMP_LOG, "--files", ",".join(indexes), "--verify-index-only"), DUMP_LOG, ())
    assert "Mismatch" not in verified and "Exception" not in verified, verified
