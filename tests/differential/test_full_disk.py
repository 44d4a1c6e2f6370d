"""A node whose only log dir is full when it starts again after kill -9, on Apache Kafka and on
Gregor, each a single node on a small tmpfs of its own: both refuse to start, and both start
and serve every acknowledged record once space is back.

Recovery after kill -9 needs space (Kafka maps its index files, Gregor rewrites indexes and
producer snapshots), and a full disk fails it. Kafka 4.4.0 (as 4.3.1) exits with code 1: "Encountered
fatal fault", a Java InternalError from the mapped offset index of its metadata log, with the
stack trace. Gregor exits with code 2 and one line (tests/integration/test_faults.py checks
that there is no traceback). A supervisor's restarts fail on either until space returns."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.disks import fill, free, small_tmpfs
from tests.integration.harness import BrokerProcess
from tests.integration.kafka import KafkaNode
from tests.integration.test_faults import consume, produce, values

DISK_MB = 64
RECORDS = 2000
REFUSAL = {"kafka": "exited with code 1 .*Encountered fatal fault",
           "gregor": "exited with code 2 .*No space left on device"}


def _node(side: str, workdir: Path, data: Path) -> KafkaNode | BrokerProcess:
    if side == "kafka":
        return KafkaNode(workdir, {"log.dirs": str(data)})
    return BrokerProcess(workdir, {"log.dirs": str(data)})


def _create(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)


@pytest.mark.parametrize("side", ["kafka", "gregor"])
def test_a_node_whose_only_log_dir_is_full_after_kill9_does_not_start_and_loses_nothing(
    side: str, tmp_path: Path
) -> None:
    topic = f"full-{uuid.uuid4().hex[:8]}"
    sent = values("f", RECORDS)
    with small_tmpfs(tmp_path / "disk", DISK_MB) as disk:
        node = _node(side, tmp_path / side, disk / "data")
        node.start()
        try:
            _create(node.bootstrap, topic)
            produce(node.bootstrap, topic, sent)
            node.kill9()
            filler = fill(disk)
            try:
                with pytest.raises(RuntimeError, match=f"(?s){REFUSAL[side]}"):
                    node.start()
            finally:
                free(filler)
            node.start()
            assert consume(node.bootstrap, topic, 0, RECORDS) == sent
        finally:
            node.stop()
