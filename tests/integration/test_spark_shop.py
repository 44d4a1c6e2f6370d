"""The shop pipeline exactly once across crashes: the Spark driver and the broker, kill -9.

Purchases come in transactions (some aborted). The pipeline runs as a child process
(`python -m gregor_spark.shop run`: a real driver with its JVM and Python workers) killed
with SIGKILL at random points and restarted from its checkpoint; in the end every
committed purchase has exactly one invoice and one shipment in read_committed, and there
is nothing else. The broker variant kills and restarts the broker under a running query.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gregor_spark import kafka
from gregor_spark.shop import Topics, check, create_topics, generate, start_pipeline
from tests.integration.harness import REPO_ROOT, BrokerFactory, BrokerProcess, unique_topic, wait_until
from tests.integration.spark_support import SPARK_BROKER_OVERRIDES

pytestmark = pytest.mark.integration

# Short transactions timeouts: a zombie transaction of a killed driver ends soon.
SINK_OPTIONS = {"kafka.transaction.timeout.ms": "10000"}
PIPELINE_S = 240.0


@pytest.fixture
def kafka_broker(broker_factory: BrokerFactory) -> BrokerProcess:
    return broker_factory(SPARK_BROKER_OVERRIDES)


def shop_topics() -> Topics:
    return Topics(unique_topic("purchases"), unique_topic("invoices"), unique_topic("shipments"))


def output_end(bootstrap: str, topic: str, isolation: str = "read_committed") -> int:
    """The end of `topic`-0: read_committed, its last stable offset (grows with every
    committed output transaction); read_uncommitted, its high watermark (with every row)."""
    consumer = kafka.open_consumer({"kafka.bootstrap.servers": bootstrap, "kafka.isolation.level": isolation})
    try:
        return kafka.watermarks(consumer, [(topic, 0)])[(topic, 0)][1]
    finally:
        consumer.close()


class Driver:
    """`python -m gregor_spark.shop run` in its own process group (driver JVM and workers)."""

    def __init__(self, bootstrap: str, topics: Topics, checkpoint: Path, log: Path, *extra: str) -> None:
        args = [sys.executable, "-m", "gregor_spark.shop", "run", "--bootstrap", bootstrap,
                "--purchases", topics.purchases, "--invoices", topics.invoices,
                "--shipments", topics.shipments, "--checkpoint", str(checkpoint),
                *(f"--option={k}={v}" for k, v in SINK_OPTIONS.items()), *extra]
        self.log, self.bootstrap = log, bootstrap
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(args, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    def kill9(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-40:])


def drain(spark: Any, bootstrap: str, checkpoint: str, topics: Topics) -> None:
    """Resume the pipeline from `checkpoint` until it has processed every purchase there is."""
    start_pipeline(spark, bootstrap, checkpoint, topics, available_now=True,
                   sink_options=SINK_OPTIONS).awaitTermination()


def assert_exactly_once(bootstrap: str, topics: Topics, committed: list[str]) -> None:
    result = check(bootstrap, topics)
    assert (result.missing, result.duplicated, result.unexpected) == ([], [], [])
    assert (result.purchases, result.invoices, result.shipments) == (len(committed),) * 3


def run_until_killed(driver: Driver, topics: Topics, target: int, isolation: str) -> None:
    """Let `driver` run until the invoices' end for `isolation` reaches `target`, then kill -9."""
    try:
        wait_until(lambda: output_end(driver.bootstrap, topics.invoices, isolation) >= target
                   or not driver.alive(),
                   timeout=PIPELINE_S, interval=0.05, msg="no progress of the pipeline")
        assert driver.alive(), driver.tail()
    finally:
        driver.kill9()


def test_driver_killed_at_random_points_writes_each_purchase_once(
    spark: Any, kafka_broker: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap, topics, rng = kafka_broker.bootstrap, shop_topics(), random.Random(15)
    create_topics(bootstrap, topics, partitions=2)
    committed = generate(bootstrap, topics.purchases, 240, per_txn=20, abort_every=3, seed=1)
    checkpoint, log = tmp_path / "checkpoint", tmp_path / "driver.log"
    # Kill after a random number of further invoice offsets: written (most likely inside an
    # open transaction), then committed (most likely before Spark's commit log has the batch).
    for n, isolation in enumerate(["read_uncommitted", "read_committed"]):
        target = output_end(bootstrap, topics.invoices, isolation) + rng.randint(5, 60)
        run_until_killed(Driver(bootstrap, topics, checkpoint, log, "--trigger-ms", "100",
                                "--max-offsets-per-trigger", "40"), topics, target, isolation)
        committed += generate(bootstrap, topics.purchases, 60, per_txn=20, abort_every=2, seed=n)
    # The last run drains what is left, in this process's session (one JVM start less).
    drain(spark, bootstrap, str(checkpoint), topics)
    assert_exactly_once(bootstrap, topics, committed)


def test_broker_killed_and_restarted_under_the_pipeline(
    spark: Any, kafka_broker: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap, topics = kafka_broker.bootstrap, shop_topics()
    create_topics(bootstrap, topics, partitions=2)
    committed = generate(bootstrap, topics.purchases, 300, per_txn=20, abort_every=4, seed=2)
    checkpoint = str(tmp_path / "checkpoint")
    query = start_pipeline(spark, bootstrap, checkpoint, topics, trigger_ms=100, max_offsets=40,
                           sink_options=SINK_OPTIONS)
    try:
        wait_until(lambda: output_end(bootstrap, topics.invoices) > 0, timeout=PIPELINE_S,
                   interval=0.05, msg="no output before the broker kill")
        kafka_broker.kill9()
        kafka_broker.start()
        at_restart = output_end(bootstrap, topics.invoices)
        # The query rides the restart out (librdkafka reconnects; a failed task is retried),
        # or fails; either way it is then stopped and resumed from its checkpoint.
        wait_until(lambda: output_end(bootstrap, topics.invoices) > at_restart or not query.isActive,
                   timeout=PIPELINE_S, interval=0.05, msg="no progress after the broker restart")
    finally:
        query.stop()
    drain(spark, bootstrap, checkpoint, topics)
    assert_exactly_once(bootstrap, topics, committed)
