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

Apache Kafka 4.4.0 (bench/reference.py: one KRaft node, and three for the cluster rows, started
as its own scripts start it: -Xmx1G -Xms1G, G1) runs the same workloads in the same run as the
reference: each row is printed with Gregor's figure, Kafka's and the ratio. Kafka's figures are
not compared with the baseline.

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
from dataclasses import dataclass
from pathlib import Path

from bench import reference
from bench.reference import Comparison, Server
from tests.integration.harness import java_command, prefixed_json

BENCHMARK = "transactions"
VALUE_BYTES = 1024
MIB = 1 << 20
SINGLE = {"transaction.state.log.replication.factor": 1, "offsets.topic.replication.factor": 1}
ONE, CLUSTER = "1 broker", "3 brokers RF 3"


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


def measure(comparison: Comparison, topology: str, server: Server, replicas: int, scale: float) -> None:
    topic = server.create_topic(f"bench-txn-{uuid.uuid4().hex[:6]}", 1, replicas)
    for w in workloads(scale):
        r = run(server.bootstrap, topic, w)
        detail = (f"{r.txn_per_s:>7,.0f} txn/s {r.mib_per_s:>6.1f} MiB/s  p50 {r.p50_ms:>6.1f} ms"
                  f"  p99 {r.p99_ms:>7.1f} ms")
        comparison.record(server.side, f"{topology}: {w.name}", r.figure(w.unit), w.unit, detail)


def main() -> None:
    parser = reference.arguments(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]))
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the default transactions")
    args = parser.parse_args()
    comparison = Comparison(BENCHMARK)
    shapes = ((ONE, reference.SINGLE, SINGLE, 1), (CLUSTER, reference.CLUSTER, {}, 3))
    with tempfile.TemporaryDirectory(prefix="gregor-bench-txn-") as tmp:
        for topology, starts, overrides, replicas in shapes:
            for n, start in enumerate(starts):
                with start(Path(tmp) / f"{replicas}-{n}", overrides) as server:
                    measure(comparison, topology, server, replicas, args.scale)
    comparison.finish(args.update_baseline)


if __name__ == "__main__":
    main()
