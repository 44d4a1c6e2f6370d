"""The Apache Kafka Java client (kafka-clients 3.9, from .deps/java) against Gregor.

One JVM run of tests/integration/java/RoundTrip.java covers every codec x acks
case plus an auto-created topic (JVM start-up is the slow part); each case is
then asserted by its own parametrized test. The Java producer's output is also
read back with confluent-kafka and compared with the same records generated in
Python, so the two clients agree byte for byte.
"""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from tests.integration.clients import assign_consumer, poll_records
from tests.integration.harness import (
    CODECS,
    BrokerProcess,
    assert_same_records,
    make_records,
    prefixed_json,
    require_java,
    run_java,
    unique_topic,
)

pytestmark = [pytest.mark.integration, pytest.mark.java]

N = 200
ACKS = ["0", "1", "all"]
CASES = [f"{codec}:{acks}" for codec in CODECS for acks in ACKS] + ["zstd:all:auto", "none:1:auto"]



class JavaRun:
    def __init__(self, proc: subprocess.CompletedProcess[str], base_ts: int, prefix: str) -> None:
        self.proc = proc
        self.base_ts = base_ts
        self.prefix = prefix
        self.results: dict[str, dict[str, Any]] = {}
        for r in prefixed_json(proc.stdout):
            self.results[r["case"]] = r

    def output(self) -> str:
        return (
            f"exit code {self.proc.returncode}\n--- stdout ---\n{self.proc.stdout[-4000:]}\n"
            f"--- stderr ---\n{self.proc.stderr[-6000:]}"
        )


@pytest.fixture(scope="module")
def java_run(module_broker: BrokerProcess) -> JavaRun:
    require_java()
    base_ts = int(time.time() * 1000) - 100_000
    prefix = unique_topic("java")
    proc = run_java("RoundTrip.java", module_broker.bootstrap, str(N), str(base_ts), prefix, *CASES)
    return JavaRun(proc, base_ts, prefix)


@pytest.mark.parametrize("case", CASES)
def test_java_round_trip(java_run: JavaRun, case: str) -> None:
    result = java_run.results.get(case)
    assert result is not None, f"no result for {case}\n{java_run.output()}"
    assert result["ok"], f"{case}: {result['errors']}\n{json.dumps(result)}"
    assert result["consumed"] == N
    assert result["earliest"] == 0 and result["latest"] == N
    assert result["latestConsumed"] == 7


@pytest.mark.parametrize("case", ["gzip:all", "lz4:1", "zstd:all:auto"])
def test_java_produced_records_read_by_librdkafka(
    java_run: JavaRun, module_broker: BrokerProcess, case: str
) -> None:
    result = java_run.results.get(case)
    assert result is not None, f"no result for {case}\n{java_run.output()}"
    assert result.get("produced") == N, f"Java did not produce {case}: {result['errors']}"
    sent = make_records(N, java_run.base_ts, tag="j")
    c = assign_consumer(module_broker.bootstrap)
    try:
        c.assign([TopicPartition(result["topic"], 0, 0)])
        got = [r for _offset, r in poll_records(c, N)]
    finally:
        c.close()
    assert_same_records(sent, got)


def test_java_exit_code(java_run: JavaRun) -> None:
    assert java_run.proc.returncode == 0, java_run.output()
