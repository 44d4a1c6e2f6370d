"""Cluster benchmarks (`make bench`): replication cost and failover time.

Starts etcd and three brokers (tests/integration/cluster.py), then
- produces RECORDS records of 1 KiB with acks=all and idempotence (librdkafka,
  4 partitions) to a topic with replication factor 3 (min.insync.replicas 2) and to
  one with replication factor 1, and prints records/s for each and their ratio;
- kills the leader of a replication-factor-3 partition with kill -9 and measures
  the time until an acks=all produce to that partition is acknowledged again.
Then the same on three Apache Kafka nodes (bench/reference.py: KRaft, the same replication
factors, a 2 s broker session and replica lag as Gregor's cluster), with Gregor's figure,
Kafka's and the ratio.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer

from bench import reference
from bench.produce_fetch import _produce
from bench.reference import GREGOR, KAFKA, Comparison, Server

BENCHMARK = "cluster"


def _topic(server: Server, name: str, rf: int) -> str:
    return server.create_topic(name, 4, rf, {"min.insync.replicas": str(min(rf, 2))})


def _failover_s(server: Server, topic: str) -> float:
    leader = server.leader(topic)
    producer = Producer({"bootstrap.servers": server.bootstrap, "acks": "all", "enable.idempotence": True,
                         "message.timeout.ms": 60000, "topic.metadata.refresh.interval.ms": 200,
                         "retry.backoff.ms": 20, "reconnect.backoff.max.ms": 100, "log_level": 2})
    producer.produce(topic, b"before", partition=0)
    assert producer.flush(30) == 0
    killed = time.perf_counter()
    server.kill9(leader)
    producer.produce(topic, b"after", partition=0)
    assert producer.flush(60) == 0, "no acknowledgement after the failover"
    elapsed = time.perf_counter() - killed
    server.restart(leader)
    return elapsed


def measure(server: Server, comparison: Comparison, records: int) -> None:
    for rf in (3, 1):
        topic = _topic(server, f"bench-rf{rf}", rf)
        seconds = _produce(server.bootstrap, topic, records, 1024)
        comparison.record(server.side, f"produce RF {rf}, acks=all, 1 KiB", records / seconds, "rec/s")
    failover = _failover_s(server, _topic(server, "bench-failover", 3))
    comparison.record(server.side, "leader kill -9 -> first acks=all ack", failover, "s", higher=False)


def main() -> None:
    parser = reference.arguments(argparse.ArgumentParser(description=__doc__))
    parser.add_argument("--records", type=int, default=100_000)
    args = parser.parse_args()
    comparison = Comparison(BENCHMARK)
    with tempfile.TemporaryDirectory(prefix="gregor-bench-cluster-") as tmp:
        for n, start in enumerate(reference.CLUSTER):
            with start(Path(tmp) / str(n), {"log.segment.bytes": 1 << 30}) as server:
                measure(server, comparison, args.records)
    rf = {side: comparison.figures["produce RF 3, acks=all, 1 KiB"].get(side, 0)
          / comparison.figures["produce RF 1, acks=all, 1 KiB"].get(side, 1) for side in (GREGOR, KAFKA)}
    print("replication factor 3 runs at " + ", ".join(f"{v:.0%} ({side})" for side, v in rf.items())
          + " of replication factor 1")
    comparison.finish(args.update_baseline)


if __name__ == "__main__":
    main()
