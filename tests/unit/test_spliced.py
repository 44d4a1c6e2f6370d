"""protocol/spliced.py: a Metadata answer written around its topics' kept bytes is byte for
byte the answer's own encoding, at every version, with and without authorized operations."""

from __future__ import annotations

import uuid

import pytest
from kafka.protocol.metadata import MetadataResponse as M

from protocol.spliced import encode_item, encode_spliced

T = M.MetadataResponseTopic
P = T.MetadataResponsePartition
NOT_PROVIDED = None


def _topic(name: str, partitions: int, operations: set[int] | None = NOT_PROVIDED) -> T:
    return T(error_code=0, name=name, topic_id=uuid.uuid4(), is_internal=name.startswith("__"),
             partitions=[P(error_code=5 if i == 1 else 0, partition_index=i, leader_id=i % 3 + 1,
                           leader_epoch=7, replica_nodes=[1, 2, 3], isr_nodes=[1, 3],
                           offline_replicas=[2] if i == 2 else []) for i in range(partitions)],
             authorized_operations=operations)


def _answer(topics: list[T], cluster_operations: set[int] | None) -> M:
    return M(throttle_time_ms=3, brokers=[M.MetadataResponseBroker(node_id=1, host="h", port=9, rack="r"),
                                          M.MetadataResponseBroker(node_id=2, host="i", port=8, rack=None)],
             cluster_id="cid", controller_id=2, topics=topics, error_code=0,
             authorized_operations=cluster_operations)


@pytest.mark.parametrize("version", range(M.min_version, M.max_version + 1))
@pytest.mark.parametrize("operations", [NOT_PROVIDED, {3, 4, 8}])
@pytest.mark.parametrize("count", [0, 1, 3])
def test_a_spliced_answer_is_the_answer_s_own_encoding(
    version: int, operations: set[int] | None, count: int
) -> None:
    topics = [_topic(f"t{i}", i + 2, operations) for i in range(count)]
    topics += [_topic("__internal", 1)] if count else []
    answer = _answer(topics, operations)
    items = [encode_item(M, "topics", t, version) for t in topics]
    assert encode_spliced(answer, "topics", items, version) == answer.encode(version=version)
