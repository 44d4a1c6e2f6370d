"""Width (`make bench`): what the control plane of one broker costs as partitions grow.

At each size (topics of 100 partitions, replication factor 1) on one Gregor broker and one
Apache Kafka node, side by side in the same run:

- create: one CreateTopics for every topic, until a full Metadata shows every partition led;
- full Metadata: the latency of a Metadata request for every topic (v12, over one raw
  connection, so that no client library's own cost is timed), p50 with p99 beside it;
- restart: a clean stop (SIGTERM) and start, and a kill -9 and start, each until a full
  Metadata shows every partition led again.

Printed per size, so that a cost growing per partition shows as a slope across the rows.
Kafka's file-descriptor needs bound the largest size: the benchmark raises its soft
`ulimit -n` to the hard limit and says when that held a size back.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from bench import reference
from bench.reference import Comparison, Server
from protocol.messages import REQUESTS
from tests.integration.wire import WireClient

BENCHMARK = "scale"
PER_TOPIC = 100
METADATA, VERSION = 3, 12
SAMPLES = 30
FDS_PER_PARTITION = 3  # Kafka: a segment's log, index and time index
SINGLE = {"transaction.state.log.replication.factor": 1, "offsets.topic.replication.factor": 1}


def _port(server: Server) -> int:
    return int(server.bootstrap.split(",")[0].rsplit(":", 1)[1])


def _led(server: Server) -> int:
    """How many partitions of the benchmark's topics a full Metadata shows led."""
    with WireClient(_port(server)) as c:
        answer = c.call(REQUESTS[METADATA](version=VERSION, topics=None), VERSION)
    ours = [t for t in answer.topics if t.name.startswith("scale-")]
    return sum(1 for t in ours for p in t.partitions if p.leader_id >= 0)


def _until_led(server: Server, partitions: int, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while _led(server) < partitions:
        if time.monotonic() > deadline:
            raise SystemExit(f"{server.side}: not every one of {partitions} partitions led in {timeout_s} s")
        time.sleep(0.05)


def _create_s(server: Server, topics: int) -> float:
    admin = AdminClient({"bootstrap.servers": server.bootstrap, "log_level": 2})
    started = time.perf_counter()
    wanted = [NewTopic(f"scale-{i:05d}", PER_TOPIC, 1) for i in range(topics)]
    for future in admin.create_topics(wanted, operation_timeout=300, request_timeout=300).values():
        future.result(600)
    _until_led(server, topics * PER_TOPIC)
    return time.perf_counter() - started


def _metadata_ms(server: Server) -> tuple[float, float]:
    """p50 and p99 of a full Metadata request, in ms."""
    times = []
    with WireClient(_port(server)) as c:
        for _ in range(SAMPLES):
            started = time.perf_counter()
            c.call(REQUESTS[METADATA](version=VERSION, topics=None), VERSION)
            times.append((time.perf_counter() - started) * 1000)
    cuts = statistics.quantiles(times, n=100)
    return cuts[49], cuts[98]


def _restart_s(server: Server, partitions: int, kill9: bool) -> float:
    started = time.perf_counter()
    server.bounce(kill9)
    _until_led(server, partitions)
    return time.perf_counter() - started


def measure(comparison: Comparison, server: Server, topics: int) -> None:
    partitions = topics * PER_TOPIC
    size = f"{partitions:,} partitions"
    side = server.side
    comparison.record(side, f"{size}: create until all led", _create_s(server, topics), "s", higher=False)
    p50, p99 = _metadata_ms(server)
    comparison.record(side, f"{size}: full Metadata p50", p50, "ms", f"p99 {p99:.1f} ms", higher=False)
    for kill9, how in ((False, "clean stop"), (True, "kill -9")):
        seconds = _restart_s(server, partitions, kill9)
        comparison.record(side, f"{size}: restart after {how}, until all led", seconds, "s", higher=False)


def _raise_fd_limit(sizes: list[int]) -> list[int]:
    """The sizes the hard file-descriptor limit allows Kafka (the soft limit raised to it)."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    allowed = [s for s in sizes if s * FDS_PER_PARTITION < hard]
    for s in sorted(set(sizes) - set(allowed)):
        needs = s * FDS_PER_PARTITION
        print(f"{s:,} partitions left out: Kafka needs about {needs:,} files, ulimit -n is {hard}")
    return allowed


def main() -> None:
    parser = reference.arguments(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]))
    parser.add_argument("--partitions", type=int, nargs="+", default=[1000, 5000],
                        help="sizes to measure (multiples of 100)")
    args = parser.parse_args()
    comparison = Comparison(BENCHMARK)
    for partitions in _raise_fd_limit(args.partitions):
        for n, start in enumerate(reference.SINGLE):
            with tempfile.TemporaryDirectory(prefix="gregor-bench-scale-") as tmp:
                with start(Path(tmp) / f"{partitions}-{n}", SINGLE) as server:
                    measure(comparison, server, partitions // PER_TOPIC)
    comparison.finish(args.update_baseline)


if __name__ == "__main__":
    main()
