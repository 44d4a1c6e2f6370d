"""Produce throughput and broker CPU cost with 1 KiB records (record validation's budget).

Starts a broker on a free port with a temporary data dir, then, for each
compression codec asked for, produces RECORDS records of 1 KiB to a fresh
4-partition topic with librdkafka (acks=all, idempotence on) and prints:

- records/s and MB/s (wall clock: noisy when the machine is shared);
- the broker's CPU time per MB produced (user + system time of the broker
  process from /proc/<pid>/stat over the produce phase): the repeatable figure,
  much less sensitive to other load on the machine than the wall clock.

Each codec is run ROUNDS times; the median of each figure is printed last.
Run with `make bench`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from bench.produce_fetch import _produce
from tests.integration.harness import BrokerProcess

PARTITIONS = 4
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


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


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process (fields 14 and 15 of /proc/<pid>/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _round(broker: BrokerProcess, topic: str, count: int, size: int, compression: str) -> Round:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(15)
    assert broker.proc is not None
    pid = broker.proc.pid
    cpu_before = _cpu_seconds(pid)
    start = time.perf_counter()
    _produce(broker.bootstrap, topic, count, size, compression)
    seconds = time.perf_counter() - start
    return Round(seconds, _cpu_seconds(pid) - cpu_before, count * size / 1e6)


def _line(label: str, r: Round, count: int) -> str:
    return (f"{label:18s} {r.seconds:6.2f} s  {count / r.seconds:8.0f} records/s  {r.mb_per_s:6.1f} MB/s  "
            f"broker CPU {r.cpu_ms_per_mb:6.2f} ms/MB")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compression", default="none,lz4", help="comma-separated librdkafka codecs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp)).start()
        try:
            for compression in args.compression.split(","):
                rounds = []
                for n in range(args.rounds):
                    r = _round(broker, f"bench-{compression}-{n}", args.records, args.size, compression)
                    print(_line(f"produce {compression} #{n + 1}", r, args.records), flush=True)
                    rounds.append(r)
                median = Round(
                    statistics.median(r.seconds for r in rounds),
                    statistics.median(r.cpu_seconds for r in rounds),
                    rounds[0].megabytes,
                )
                print(_line(f"produce {compression} median", median, args.records)
                      + f"  ({args.records} x {args.size} B, acks=all, idempotent)", flush=True)
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
