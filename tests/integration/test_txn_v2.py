"""Transaction version 2 (KIP-890 part 2) at the byte level: no client we test with
speaks it yet, so the requests are built by hand.

The broker finalizes transaction.version 2; Produce v12+ adds a partition to the
transaction by itself, and EndTxn v5 bumps the producer epoch at every end, so a
delayed write of a finished transaction can never land in the next one.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kafka.protocol.producer import EndTxnRequest, InitProducerIdRequest

from protocol.messages import REQUESTS
from tests.integration.harness import BrokerProcess, unique_topic
from tests.integration.wire import WireClient, build_batch, produce_request

FIND_COORDINATOR, LIST_OFFSETS = 10, 2
INVALID_PRODUCER_EPOCH, PRODUCER_FENCED = 47, 90


@pytest.fixture(scope="module")
def client(module_broker: BrokerProcess) -> Iterator[WireClient]:
    with WireClient(module_broker.port) as c:
        yield c


def _find_coordinator(client: WireClient, tid: str) -> None:
    req = REQUESTS[FIND_COORDINATOR](key_type=1, coordinator_keys=[tid])
    answer = client.call(req, 4)
    assert answer.coordinators[0].error_code == 0, answer


def _init(client: WireClient, tid: str) -> tuple[int, int]:
    answer = client.call(InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60000,
                                               producer_id=-1, producer_epoch=-1), 5)
    assert answer.error_code == 0, answer
    return answer.producer_id, answer.producer_epoch


def _produce_txn(client: WireClient, tid: str, topic: str, pid: int, epoch: int, seq: int,
                 value: bytes, version: int = 12) -> int:
    batch = build_batch([value], producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                        transactional=True)
    answer = client.call(produce_request(topic, [(0, batch)], acks=-1, version=version,
                                         transactional_id=tid), version)
    return int(answer.responses[0].partition_responses[0].error_code)


def _end(client: WireClient, tid: str, pid: int, epoch: int, commit: bool) -> object:
    return client.call(EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                     committed=commit), 5)


def _lso(client: WireClient, topic: str) -> int:
    req = REQUESTS[LIST_OFFSETS](replica_id=-1, isolation_level=1, topics=[
        REQUESTS[LIST_OFFSETS].ListOffsetsTopic(name=topic, partitions=[
            REQUESTS[LIST_OFFSETS].ListOffsetsTopic.ListOffsetsPartition(
                partition_index=0, current_leader_epoch=-1, timestamp=-1)])])
    return int(client.call(req, 5).topics[0].partitions[0].offset)


def test_transaction_version_2_is_finalized(client: WireClient) -> None:
    answer = client.api_versions(3)
    finalized = {f.name: (f.min_version_level, f.max_version_level) for f in answer.finalized_features}
    assert finalized["transaction.version"] == (2, 2)
    versions = {k.api_key: k.max_version for k in answer.api_keys}
    assert versions[26] >= 5 and versions[0] >= 12  # EndTxn v5, Produce v12
    assert versions[24] == 3  # AddPartitionsToTxn v4+ is broker-to-broker only (KAFKA-15757)


def test_produce_adds_partition_and_end_txn_bumps_epoch(client: WireClient) -> None:
    topic, tid = unique_topic("tv2"), unique_topic("tv2-id")
    client.metadata([topic], version=4, auto_create=True)
    _find_coordinator(client, tid)
    pid, epoch = _init(client, tid)
    # No AddPartitionsToTxn: Produce v12 adds the partition itself.
    assert _produce_txn(client, tid, topic, pid, epoch, 0, b"first") == 0
    assert _lso(client, topic) == 0  # the transaction is open
    ended = _end(client, tid, pid, epoch, commit=True)
    assert ended.error_code == 0, ended  # type: ignore[attr-defined]
    assert (ended.producer_id, ended.producer_epoch) == (pid, epoch + 1)  # type: ignore[attr-defined]
    assert _lso(client, topic) == 2  # data + COMMIT marker
    # A delayed write of the finished transaction (old epoch) cannot join the next one.
    late = _produce_txn(client, tid, topic, pid, epoch, 1, b"late")
    assert late in (INVALID_PRODUCER_EPOCH, PRODUCER_FENCED)
    assert _lso(client, topic) == 2
    # The next transaction runs at the bumped epoch, sequences from 0.
    assert _produce_txn(client, tid, topic, pid, epoch + 1, 0, b"second") == 0
    aborted = _end(client, tid, pid, epoch + 1, commit=False)
    assert aborted.error_code == 0 and aborted.producer_epoch == epoch + 2  # type: ignore[attr-defined]
    assert _lso(client, topic) == 4


def test_old_produce_version_still_needs_add_partitions(client: WireClient) -> None:
    topic, tid = unique_topic("tv1"), unique_topic("tv1-id")
    client.metadata([topic], version=4, auto_create=True)
    _find_coordinator(client, tid)
    pid, epoch = _init(client, tid)
    # Produce v11 without AddPartitionsToTxn: rejected (KIP-890 part 1 verification).
    assert _produce_txn(client, tid, topic, pid, epoch, 0, b"x", version=11) == 48  # INVALID_TXN_STATE
    assert client.log_end_offset(topic) == 0  # nothing appended
