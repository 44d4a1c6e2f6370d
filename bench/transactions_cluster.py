"""Transaction benchmarks on a cluster (`make bench`): commit latency and throughput with
replication factor 3 against 1, and transaction coordinator failover time.

For each replication factor (of the data topic and of `__transaction_state`; 3 with
min.insync.replicas 2) a fresh etcd + three-broker cluster runs TRANSACTIONS transactions
of 10 records and of 1000 records (100 B, 3 partitions, librdkafka), timing each
commit_transaction (p50/p99) and the records per second of the whole loop. Then the
broker coordinating a transactional id is killed with kill -9 mid-transaction and the time
until commit_transaction succeeds on its successor is measured.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from coordinator.hashing import coordinator_partition
from tests.integration.cluster import Cluster, running_cluster

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


def _topic(cluster: Cluster, rf: int) -> str:
    name = f"bench-txn-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, rf)], operation_timeout=30)[name].result(60)
    cluster.wait_for(lambda i: all((name, p) in i.partitions and len(i.partitions[(name, p)].isr) == rf
                                   for p in range(PARTITIONS)))
    return name


def _producer(cluster: Cluster, tid: str) -> Producer:
    p = Producer({"bootstrap.servers": ",".join(b.bootstrap for b in cluster.brokers),
                  "transactional.id": tid, "linger.ms": 5, "retry.backoff.ms": 20,
                  "reconnect.backoff.max.ms": 100})
    p.init_transactions(60)
    return p


def _run(cluster: Cluster, topic: str, transactions: int, size: int) -> tuple[float, float, float]:
    """p50 and p99 commit latency (ms) and records/s of `transactions` transactions of `size`."""
    p = _producer(cluster, f"bench-{size}-{uuid.uuid4().hex[:6]}")
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


def _failover_s(cluster: Cluster, topic: str) -> float:
    tid = f"bench-failover-{uuid.uuid4().hex[:6]}"
    p = _producer(cluster, tid)
    index = coordinator_partition(tid, INTERNAL_PARTITIONS)
    coordinator = cluster.image().partitions[("__transaction_state", index)].leader
    p.begin_transaction()
    for i in range(30):
        p.produce(topic, VALUE, partition=i % PARTITIONS)
    p.flush(30)
    killed = time.perf_counter()
    cluster.broker(coordinator).kill9()
    p.commit_transaction(60)
    elapsed = time.perf_counter() - killed
    cluster.broker(coordinator).start()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--transactions", type=int, default=200)
    args = parser.parse_args()
    for rf in (3, 1):
        with tempfile.TemporaryDirectory(prefix="gregor-bench-txn-") as tmp:
            with running_cluster(Path(tmp), show_logs_on_error=True, overrides=_overrides(rf)) as cluster:
                topic = _topic(cluster, rf)
                for size in (10, 1000):
                    count = args.transactions if size == 10 else max(10, args.transactions // 10)
                    p50, p99, rate = _run(cluster, topic, count, size)
                    print(f"transactions of {size} records, replication factor {rf}: "
                          f"commit p50 {p50:.1f} ms, p99 {p99:.1f} ms, {rate:,.0f} records/s")
                if rf == 3:
                    print(f"coordinator kill -9 -> commit_transaction done on its successor: "
                          f"{_failover_s(cluster, topic):.2f} s (broker.session.timeout.ms 2000)")


if __name__ == "__main__":
    main()
