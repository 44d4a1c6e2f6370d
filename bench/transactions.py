"""Back-to-back transactions (`make bench`): the Java client's perf loop against one broker
and against the three-broker cluster (replication factor 3, min.insync.replicas 2).

Each row runs tests/integration/java/TxnPerf.java: one transactional producer (acks=all,
1 KiB values, one partition) committing transactions of 10 or of 1,000 records back to
back, with the Java 3.9 client (transaction version 1) and the Java 4.3 client
(transaction version 2), plus the idempotent (non-transactional) produce rate of the same
run. It prints transactions/s, MiB/s and the p50/p99 latency of one transaction, and
compares each row's figure with bench/baseline.json: a row more than 25% below its
baseline says REGRESSION and the benchmark exits 1. `--update-baseline` records this
run's figures as the new baseline (commit it with the reason).

Apache Kafka 4.3.1 (one KRaft node from `make kafka-deps`, started as its own scripts start it:
-Xmx1G -Xms1G, G1) runs the same workloads in the same run as the reference: each row of one
Gregor broker is printed next to Kafka's, with the ratio. Kafka's rows are not compared with
the baseline.

A transaction's next request used to find the previous transaction still completing and
be bounced with CONCURRENT_TRANSACTIONS (20-100 ms of client back-off); these rows would
have shown it as a fall of more than 10x.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from bench import baseline
from tests.integration.cluster import running_cluster
from tests.integration.harness import BrokerProcess, java_command, prefixed_json
from tests.integration.kafka import SCRIPT_JVM_OPTS, started_kafka

BENCHMARK = "transactions"
VALUE_BYTES = 1024
MIB = 1 << 20
SINGLE = {"transaction.state.log.replication.factor": 1, "offsets.topic.replication.factor": 1}
# Kafka's internal topics as many partitions as Gregor's (the test fixture's default is 1)
KAFKA: dict[str, object] = {"transaction.state.log.num.partitions": 50, "offsets.topic.num.partitions": 50}
ONE, REFERENCE, CLUSTER = "1 broker", "Kafka 4.3.1", "3 brokers RF 3"


@dataclass(frozen=True, slots=True)
class Workload:
    client: str  # "3.9" or "4.3"
    records: int  # per transaction
    transactions: int
    mode: str = "txn"  # or "idempotent"

    @property
    def name(self) -> str:
        what = "idempotent, flush every" if self.mode == "idempotent" else "txn of"
        return f"Java {self.client} {what} {self.records} records"

    @property
    def unit(self) -> str:
        """The figure compared with the baseline: txn/s for small transactions, else MiB/s."""
        return "txn/s" if self.mode == "txn" and self.records <= 10 else "MiB/s"


@dataclass(frozen=True, slots=True)
class Result:
    txn_per_s: float
    mib_per_s: float
    p50_ms: float
    p99_ms: float

    def figure(self, unit: str) -> float:
        return self.txn_per_s if unit == "txn/s" else self.mib_per_s


def workloads(scale: float) -> list[Workload]:
    small, large = max(50, int(2000 * scale)), max(10, int(100 * scale))
    return [
        Workload("3.9", 10, small), Workload("4.3", 10, small),
        Workload("3.9", 1000, large), Workload("4.3", 1000, large),
        Workload("3.9", 1000, large, "idempotent"),
    ]


def run(bootstrap: str, topic: str, w: Workload) -> Result:
    warmup = str(max(5, w.transactions // 10))
    command = java_command("TxnPerf.java", bootstrap, topic, str(w.transactions), str(w.records),
                           str(VALUE_BYTES), w.mode, warmup, client=w.client)
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    found = prefixed_json(done.stdout)
    if done.returncode != 0 or not found:
        sys.exit(f"{w.name} failed (exit {done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-4000:]}")
    r = found[0]
    return Result(r["transactions"] / r["seconds"], r["bytes"] / MIB / r["seconds"], r["p50_ms"], r["p99_ms"])


def create_topic(bootstrap: str, replicas: int) -> str:
    name = f"bench-txn-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, replicas)], operation_timeout=30)[name].result(60)
    return name


@contextmanager
def one_broker(base: Path) -> Iterator[tuple[str, int]]:
    broker = BrokerProcess(base / "single", SINGLE).start()
    try:
        yield broker.bootstrap, 1
    finally:
        broker.close()


@contextmanager
def kafka_node(base: Path) -> Iterator[tuple[str, int]]:
    with started_kafka(base / "kafka", KAFKA, jvm_opts=SCRIPT_JVM_OPTS) as node:
        yield node.bootstrap, 1


@contextmanager
def three_brokers(base: Path) -> Iterator[tuple[str, int]]:
    (base / "cluster").mkdir()
    with running_cluster(base / "cluster", show_logs_on_error=True) as cluster:
        yield cluster.bootstrap, 3


def measure(topology: str, bootstrap: str, replicas: int, scale: float) -> dict[str, float]:
    topic = create_topic(bootstrap, replicas)
    figures = {}
    for w in workloads(scale):
        r = run(bootstrap, topic, w)
        row = f"{topology}: {w.name}"
        figure = r.figure(w.unit)
        figures[row] = figure
        verdict = "reference" if topology == REFERENCE else baseline.verdict(BENCHMARK, row).text(figure)
        print(f"{row:<58} {r.txn_per_s:>9,.0f} txn/s {r.mib_per_s:>7.1f} MiB/s  p50 {r.p50_ms:>6.1f} ms"
              f"  p99 {r.p99_ms:>7.1f} ms   {figure:,.1f} {w.unit}: {verdict}", flush=True)
    return figures


def print_ratios(figures: dict[str, float], scale: float) -> None:
    """Each workload on one Gregor broker against the same on one Kafka node."""
    print(f"\n{'workload':<44} {'Gregor':>9} {'Kafka':>9} {'ratio':>6}")
    for w in workloads(scale):
        gregor, kafka = figures[f"{ONE}: {w.name}"], figures[f"{REFERENCE}: {w.name}"]
        print(f"{w.name:<44} {gregor:>9,.1f} {kafka:>9,.1f} {gregor / kafka:>6.2f}  ({w.unit})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the default transactions")
    parser.add_argument("--update-baseline", action="store_true")
    args = parser.parse_args()
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="gregor-bench-txn-") as tmp:
        for topology, start in ((ONE, one_broker), (REFERENCE, kafka_node), (CLUSTER, three_brokers)):
            with start(Path(tmp)) as (bootstrap, replicas):
                figures |= measure(topology, bootstrap, replicas, args.scale)
    print_ratios(figures, args.scale)
    figures = {row: v for row, v in figures.items() if not row.startswith(REFERENCE)}
    if args.update_baseline:
        baseline.update(BENCHMARK, figures)
        print(f"baseline updated: {baseline.BASELINE}")
        return
    regressed = [row for row, v in figures.items() if baseline.verdict(BENCHMARK, row).regressed(v)]
    if regressed:
        sys.exit(f"REGRESSION in {len(regressed)} rows: {', '.join(regressed)}")


if __name__ == "__main__":
    main()
