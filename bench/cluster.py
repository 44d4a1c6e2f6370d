"""Cluster benchmarks (`make bench`): replication cost and failover time.

Starts etcd and three brokers (tests/integration/cluster.py), then
- produces RECORDS records of 1 KiB with acks=all and idempotence (librdkafka,
  4 partitions) to a topic with replication factor 3 (min.insync.replicas 2) and to
  one with replication factor 1, and prints records/s for each and their ratio;
- kills the leader of a replication-factor-3 partition with kill -9 and measures
  the time until an acks=all produce to that partition is acknowledged again.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.produce_fetch import _produce
from tests.integration.cluster import Cluster, running_cluster


def _topic(cluster: Cluster, name: str, rf: int) -> str:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    configs = {"min.insync.replicas": str(min(rf, 2))}
    admin.create_topics([NewTopic(name, 4, rf, config=configs)], operation_timeout=30)[name].result(60)
    cluster.wait_for(lambda i: all((name, p) in i.partitions and len(i.partitions[(name, p)].isr) == rf
                                   for p in range(4)))
    return name


def _failover_s(cluster: Cluster, topic: str) -> float:
    leader = cluster.partition(topic).leader
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                         "message.timeout.ms": 60000, "topic.metadata.refresh.interval.ms": 200,
                         "retry.backoff.ms": 20, "reconnect.backoff.max.ms": 100})
    producer.produce(topic, b"before", partition=0)
    assert producer.flush(30) == 0
    killed = time.perf_counter()
    cluster.broker(leader).kill9()
    producer.produce(topic, b"after", partition=0)
    assert producer.flush(60) == 0, "no acknowledgement after the failover"
    elapsed = time.perf_counter() - killed
    cluster.broker(leader).start()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=100_000)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="gregor-bench-cluster-") as tmp,
        running_cluster(Path(tmp), True, overrides={"log.segment.bytes": 1 << 30}) as cluster,
    ):
        rates = {}
        for rf in (3, 1):
            topic = _topic(cluster, f"bench-rf{rf}", rf)
            rates[rf] = args.records / _produce(cluster.bootstrap, topic, args.records, 1024)
            print(f"cluster produce, replication factor {rf}, acks=all, 1 KiB: "
                  f"{rates[rf]:,.0f} records/s")
        print(f"replication factor 3 runs at {rates[3] / rates[1]:.0%} of replication factor 1")
        failover = _failover_s(cluster, _topic(cluster, "bench-failover", 3))
        print(f"leader kill -9 -> first acks=all acknowledgement on the new leader: {failover:.2f} s "
              f"(broker.session.timeout.ms 2000)")


if __name__ == "__main__":
    main()
