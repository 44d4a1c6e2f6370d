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
reference, and Tansu 0.6 (one node, its data in memory) the single-broker ones: each row is
printed with every broker's figure and Gregor's ratio to each. A single-broker row runs on a
fresh broker of each kind in turn (Gregor, Kafka, Tansu); the cluster rows share one cluster of
each kind. Beside each figure: the broker CPU per operation (utime + stime from /proc of the
broker processes, the three brokers together for the cluster rows, over the run with its
warm-up): ms per transaction on the txn/s rows, per MiB on the MiB/s rows. A workload that fails
on Tansu says so in its row. Gregor's rows are judged on the ratio to Kafka and on the CPU per
operation (bench/baseline.py); the other brokers' figures are not compared with the baseline.

A transaction's next request used to find the previous transaction still completing and
be bounced with CONCURRENT_TRANSACTIONS (20-100 ms of client back-off); these rows would
have shown it as a fall of more than 10x.
"""

from __future__ import annotations

import argparse
import subprocess
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
    cpu_ms: float  # broker CPU per transaction (txn/s rows) or per MiB (MiB/s rows)

    def figure(self, unit: str) -> float:
        return self.txn_per_s if unit == "txn/s" else self.mib_per_s


def workloads(scale: float) -> list[Workload]:
    small, large = max(50, int(2000 * scale)), max(10, int(100 * scale))
    return [
        Workload("3.9", 10, small), Workload("4.3", 10, small),
        Workload("3.9", 1000, large), Workload("4.3", 1000, large),
        Workload("3.9", 1000, large, "idempotent"),
    ]


def run(server: Server, topic: str, w: Workload) -> Result:
    warmup = max(5, w.transactions // 10)
    command = java_command("TxnPerf.java", server.bootstrap, topic, str(w.transactions), str(w.records),
                           str(VALUE_BYTES), w.mode, str(warmup), client=w.client)
    cpu_before = reference.broker_cpu_s(server)
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    cpu_s = reference.broker_cpu_s(server) - cpu_before
    found = prefixed_json(done.stdout)
    if done.returncode != 0 or not found:
        print(f"{done.stdout[-2000:]}{done.stderr[-4000:]}")
        raise RuntimeError(f"TxnPerf exit {done.returncode}: {done.stderr.strip()[-200:]}")
    r = found[0]
    done_txns = w.transactions + warmup  # the warm-up's transactions cost the broker too
    ops = done_txns if w.unit == "txn/s" else done_txns * w.records * VALUE_BYTES / MIB
    return Result(r["transactions"] / r["seconds"], r["bytes"] / MIB / r["seconds"], r["p50_ms"], r["p99_ms"],
                  1000 * cpu_s / ops)


def measure(
    comparison: Comparison, topology: str, server: Server, replicas: int, rows: list[Workload]
) -> None:
    topic = server.create_topic(f"bench-txn-{uuid.uuid4().hex[:6]}", 1, replicas)
    for w in rows:
        row = f"{topology}: {w.name}"
        with comparison.attempt(server.side, row):
            r = run(server, topic, w)
            detail = (f"{r.txn_per_s:>7,.0f} txn/s {r.mib_per_s:>6.1f} MiB/s  p50 {r.p50_ms:>6.1f} ms"
                      f"  p99 {r.p99_ms:>7.1f} ms")
            per = "txn" if w.unit == "txn/s" else "MiB"
            comparison.record(server.side, row, r.figure(w.unit), w.unit, detail, cpu_ms=r.cpu_ms, per=per)


def main() -> None:
    parser = reference.arguments(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]))
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the default transactions")
    args = parser.parse_args()
    comparison = Comparison(BENCHMARK)
    with tempfile.TemporaryDirectory(prefix="gregor-bench-txn-") as tmp:
        for i, w in enumerate(workloads(args.scale)):  # a fresh broker of each kind per row
            for n, start in enumerate(reference.WITH_TANSU):
                with start(Path(tmp) / f"1-{i}-{n}", SINGLE) as server:
                    measure(comparison, ONE, server, 1, [w])
        for n, start in enumerate(reference.CLUSTER):
            with start(Path(tmp) / f"3-{n}", {}) as server:
                measure(comparison, CLUSTER, server, 3, workloads(args.scale))
    comparison.finish(args.update_baseline)


if __name__ == "__main__":
    main()
