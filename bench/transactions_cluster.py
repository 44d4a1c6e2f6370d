"""Transaction benchmarks on a cluster (`make bench`): commit latency and throughput with
replication factor 3 against 1, and transaction coordinator failover time.

For each replication factor (of the data topic and of `__transaction_state`; 3 with
min.insync.replicas 2) a fresh etcd + three-broker cluster runs TRANSACTIONS transactions
of 10 records and of 1000 records (100 B, 3 partitions, librdkafka), timing each
commit_transaction (p50/p99) and the records per second of the whole loop. Then the
broker coordinating a transactional id is killed with kill -9 mid-transaction and the time
until commit_transaction succeeds on its successor is measured. Each shape runs on three
Apache Kafka nodes too (bench/reference.py: KRaft, the same replication factors and internal
partitions, a 2 s broker session as Gregor's), with Gregor's figure, Kafka's and the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer

from bench import reference
from bench.reference import Comparison, Server

BENCHMARK = "transactions_cluster"

PARTITIONS = 3
INTERNAL_PARTITIONS = 5
VALUE = b"x" * 100


def _overrides(rf: int) -> dict[str, int]:
    return {
        "default.replication.factor": rf, "min.insync.replicas": min(rf, 2),
        "offsets.topic.replication.factor": rf, "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": min(rf, 2),
        "transaction.state.log.num.partitions": INTERNAL_PARTITIONS,
    }


def _producer(server: Server, tid: str) -> Producer:
    p = Producer({"bootstrap.servers": server.bootstrap,
                  "transactional.id": tid, "linger.ms": 5, "retry.backoff.ms": 20,
                  "reconnect.backoff.max.ms": 100, "log_level": 2})
    p.init_transactions(60)
    return p


def _run(server: Server, topic: str, transactions: int, size: int) -> tuple[float, float, float]:
    """p50 and p99 commit latency (ms) and records/s of `transactions` transactions of `size`."""
    p = _producer(server, f"bench-{size}-{uuid.uuid4().hex[:6]}")
    latencies = []
    started = time.perf_counter()
    for _ in range(transactions):
        p.begin_transaction()
        for i in range(size):
            p.produce(topic, VALUE, partition=i % PARTITIONS)
        p.flush(30)
        t0 = time.perf_counter()
        p.commit_transaction(30)
        latencies.append((time.perf_counter() - t0) * 1000)
    elapsed = time.perf_counter() - started
    cuts = statistics.quantiles(latencies, n=100)
    return cuts[49], cuts[98], transactions * size / elapsed


def _failover_s(server: Server, topic: str) -> float:
    tid = f"bench-failover-{uuid.uuid4().hex[:6]}"
    p = _producer(server, tid)
    coordinator = server.coordinator(tid)
    p.begin_transaction()
    for i in range(30):
        p.produce(topic, VALUE, partition=i % PARTITIONS)
    p.flush(30)
    killed = time.perf_counter()
    server.kill9(coordinator)
    p.commit_transaction(60)
    elapsed = time.perf_counter() - killed
    server.restart(coordinator)
    return elapsed


def measure(server: Server, comparison: Comparison, rf: int, transactions: int) -> None:
    topic = server.create_topic(f"bench-txn-{uuid.uuid4().hex[:6]}", PARTITIONS, rf)
    for size in (10, 1000):
        count = transactions if size == 10 else max(10, transactions // 10)
        p50, p99, rate = _run(server, topic, count, size)
        row = f"transactions of {size} records, RF {rf}"
        comparison.record(server.side, row, rate, "rec/s", f"commit p50 {p50:.1f} ms, p99 {p99:.1f} ms")
    if rf == 3:
        comparison.record(server.side, "coordinator kill -9 -> commit done on its successor",
                          _failover_s(server, topic), "s", higher=False)


def main() -> None:
    parser = reference.arguments(argparse.ArgumentParser(description=__doc__))
    parser.add_argument("--transactions", type=int, default=200)
    args = parser.parse_args()
    comparison = Comparison(BENCHMARK)
    for rf in (3, 1):
        for start in reference.CLUSTER:
            with tempfile.TemporaryDirectory(prefix="gregor-bench-txn-") as tmp:
                with start(Path(tmp), _overrides(rf)) as server:
                    measure(server, comparison, rf, args.transactions)
    comparison.finish(args.update_baseline)


if __name__ == "__main__":
    main()
