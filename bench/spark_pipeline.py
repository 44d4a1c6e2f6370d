"""The shop pipeline on PySpark: rows/s through the exactly-once sink vs a plain write.

A real broker; PURCHASES purchases (JSON, committed transactions) in a 2-partition topic;
the shop query (gregor_spark.shop: an invoice and a shipment per purchase) run with
trigger availableNow from the earliest offset to the end, on local[2], in micro-batches of
at most --max-offsets purchases offsets. Once with the exactly-once sink (a transaction
per task with its commit record, the commit-topic check first) and once with
`exactlyOnce=false` (an idempotent producer, no transaction: at least once, like Spark's
own Kafka sink). A warm-up run first pays the JVM and Python worker start-up. Prints the
output rows/s and the time per micro-batch of each. Then the same on one Apache Kafka node
(bench/reference.py; the same Spark session), with Gregor's figure, Kafka's and the ratio.

Run with `python -m bench.spark_pipeline [--purchases N] [--max-offsets M]` (part of
`make bench`).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import reference
from bench.reference import Comparison, Server, wait_replicated
from gregor_spark.session import local_session
from gregor_spark.shop import Topics, check, create_topics, generate, start_pipeline

BENCHMARK = "spark_pipeline"
OVERRIDES = {"transaction.state.log.num.partitions": 2}


def _create(server: Server, topics: Topics) -> None:
    """The topics, once this server lists a leader for each partition (Kafka's brokers learn of
    a new topic a moment after CreateTopics answers)."""
    create_topics(server.bootstrap, topics)
    for name, partitions in ((topics.purchases, 2), (topics.invoices, 1), (topics.shipments, 1)):
        wait_replicated(server.bootstrap, name, partitions, 1)


def run_once(spark: Any, server: Server, purchases: str, tag: str, workdir: Path,
             max_offsets: int, exactly_once: bool) -> tuple[float, int, int]:
    """(seconds, output rows, micro-batches) of one availableNow run into fresh outputs."""
    bootstrap = server.bootstrap
    topics = Topics(purchases, f"invoices-{tag}", f"shipments-{tag}")
    _create(server, topics)
    options = {"exactlyOnce": str(exactly_once).lower()}
    start = time.perf_counter()
    query = start_pipeline(spark, bootstrap, str(workdir / f"checkpoint-{tag}"), topics,
                           available_now=True, max_offsets=max_offsets, sink_options=options)
    query.awaitTermination()
    elapsed = time.perf_counter() - start
    batches = sum(1 for p in query.recentProgress if p["numInputRows"])
    result = check(bootstrap, topics)
    if exactly_once and not result.exactly_once:
        raise AssertionError(f"{tag}: not exactly once: {result}")
    return elapsed, result.invoices + result.shipments, batches


def measure(spark: Any, server: Server, workdir: Path, args: Any, comparison: Comparison) -> None:
    bootstrap = server.bootstrap
    _create(server, Topics("warmup"))
    generate(bootstrap, "warmup", 200, per_txn=100)
    run_once(spark, server, "warmup", "warmup", workdir, args.max_offsets, True)
    _create(server, Topics("purchases"))
    generate(bootstrap, "purchases", args.purchases, per_txn=500)
    for name, exactly_once in (("exactly-once sink", True), ("plain write", False)):
        elapsed, rows, batches = run_once(spark, server, "purchases", name.split()[0],
                                          workdir, args.max_offsets, exactly_once)
        each = elapsed / max(batches, 1)
        detail = f"{rows} rows in {elapsed:.1f} s, {batches} micro-batches, {each:.2f} s each"
        comparison.record(server.side, f"shop pipeline, {name}", rows / elapsed, "rows/s", detail)


def main() -> None:
    parser = reference.arguments(argparse.ArgumentParser(description=__doc__))
    parser.add_argument("--purchases", type=int, default=20_000)
    parser.add_argument("--max-offsets", type=int, default=5_000)
    args = parser.parse_args()
    comparison = Comparison(BENCHMARK)
    print(f"shop pipeline on local[2]: {args.purchases} purchases (2 partitions), "
          f"micro-batches of <= {args.max_offsets} offsets, 2 output rows per purchase")
    with tempfile.TemporaryDirectory(prefix="gregor-bench-spark-") as tmp:
        spark = local_session("local[2]", app="gregor-bench")
        try:
            for n, start in enumerate(reference.SINGLE):
                workdir = Path(tmp) / str(n)
                with start(workdir, OVERRIDES) as server:
                    measure(spark, server, workdir, args, comparison)
        finally:
            spark.stop()
    comparison.finish(args.update_baseline)


if __name__ == "__main__":
    main()
