"""Produce throughput and broker CPU cost with 1 KiB records (record validation's budget).

Starts a broker on a free port with a temporary data dir, then, for each
compression codec asked for, produces RECORDS records of 1 KiB to a fresh
4-partition topic with librdkafka (acks=all, idempotence on) and prints:

- records/s and MB/s (wall clock: noisy when the machine is shared);
- the broker's CPU time per MB produced (user + system time of the broker
  process from /proc/<pid>/stat over the produce phase, reference.broker_cpu_s): the repeatable figure,
  much less sensitive to other load on the machine than the wall clock.

Each codec is run ROUNDS times; the median of each figure is printed last. Then the same on
one Apache Kafka node (bench/reference.py; its JVM's CPU time), with Gregor's figure, Kafka's
and the ratio. Run with `make bench`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench import reference
from bench.produce_fetch import _produce
from bench.reference import Comparison, Server

BENCHMARK = "produce_validation"

PARTITIONS = 4


@dataclass(frozen=True)
class Round:
    seconds: float
    cpu_seconds: float
    megabytes: float

    @property
    def mb_per_s(self) -> float:
        return self.megabytes / self.seconds

    @property
    def cpu_ms_per_mb(self) -> float:
        return 1000 * self.cpu_seconds / self.megabytes


def _round(server: Server, topic: str, count: int, size: int, compression: str) -> Round:
    server.create_topic(topic, PARTITIONS, 1)
    cpu_before = reference.broker_cpu_s(server)
    start = time.perf_counter()
    _produce(server.bootstrap, topic, count, size, compression)
    seconds = time.perf_counter() - start
    return Round(seconds, reference.broker_cpu_s(server) - cpu_before, count * size / 1e6)


def _line(label: str, r: Round, count: int) -> str:
    return (f"{label:18s} {r.seconds:6.2f} s  {count / r.seconds:8.0f} records/s  {r.mb_per_s:6.1f} MB/s  "
            f"broker CPU {r.cpu_ms_per_mb:6.2f} ms/MB")


def _codec(server: Server, comparison: Comparison, compression: str, args: argparse.Namespace) -> None:
    rounds = []
    for n in range(args.rounds):
        r = _round(server, f"bench-{compression}-{n}", args.records, args.size, compression)
        print(f"{server.side:<12} " + _line(f"produce {compression} #{n + 1}", r, args.records), flush=True)
        rounds.append(r)
    median = Round(
        statistics.median(r.seconds for r in rounds),
        statistics.median(r.cpu_seconds for r in rounds),
        rounds[0].megabytes,
    )
    row = f"produce {compression} (median)"
    comparison.record(server.side, f"{row}: wall clock", median.mb_per_s, "MB/s")
    comparison.record(server.side, f"{row}: broker CPU", median.cpu_ms_per_mb, "ms/MB", higher=False)


def main() -> None:
    parser = reference.arguments(argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ))
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compression", default="none,lz4", help="comma-separated librdkafka codecs")
    args = parser.parse_args()
    comparison = Comparison(BENCHMARK)
    print(f"{args.records} x {args.size} B, acks=all, idempotent")
    with tempfile.TemporaryDirectory() as tmp:
        for n, start in enumerate(reference.SINGLE):
            with start(Path(tmp) / str(n), None) as server:
                for compression in args.compression.split(","):
                    _codec(server, comparison, compression, args)
    comparison.finish(args.update_baseline)


if __name__ == "__main__":
    main()
