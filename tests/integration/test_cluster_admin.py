"""Cluster administration against etcd and three real brokers (one cluster for the module):
internal topics waiting for enough brokers, CreatePartitions, manual replica assignments,
automatic preferred-leader rebalancing and partition reassignment."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
)
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient

from protocol.errors import ErrorCode
from protocol.messages import REQUESTS
from tests.integration.clients import read_to_eof
from tests.integration.cluster import Cluster, running_cluster, wait_until_served
from tests.integration.harness import BrokerProcess, wait_until
from tests.integration.wire import WireClient, build_batch, partition_errors

FIND_COORDINATOR, INIT_PRODUCER_ID, CREATE_TOPICS, CREATE_PARTITIONS = 10, 22, 19, 37
BAD_ASSIGNMENT = ErrorCode.INVALID_REPLICATION_ASSIGNMENT


IMBALANCE_CHECK_S = 1  # auto leader rebalance every second (Kafka: 300)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("cluster"), show_logs_on_error=True, overrides={
        "leader.imbalance.check.interval.seconds": IMBALANCE_CHECK_S,
    }) as c:
        yield c


def find_coordinator(port: int, key: str, key_type: int = 0) -> Any:
    with WireClient(port) as c:
        return c.call(REQUESTS[FIND_COORDINATOR](version=3, key=key, key_type=key_type), 3)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def non_controller(cluster: Cluster) -> str:
    """The bootstrap address of a broker that is not the controller (admin is forwarded)."""
    controller = cluster.image().controller
    assert controller is not None
    return next(b.bootstrap for b in cluster.brokers if b.node_id != controller.node_id and b.running)


def served_everywhere(cluster: Cluster, topic: str, partitions: int) -> None:
    cluster.wait_for(lambda i: all(
        (topic, p) in i.partitions and i.partitions[(topic, p)].isr == i.partitions[(topic, p)].replicas
        for p in range(partitions)
    ))
    for b in cluster.brokers:
        wait_until_served(b.bootstrap, topic, partitions)


def produce_values(bootstrap: str, topic: str, values: list[int], partitions: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    for v in values:
        p.produce(topic, value=str(v).encode(), partition=v % partitions)
    assert p.flush(30) == 0


def read_values(cluster: Cluster, topic: str, partitions: int) -> dict[int, list[int]]:
    got = read_to_eof(cluster.bootstrap, [(topic, i) for i in range(partitions)], "read_committed",
                      unique("read"), 30, "all")
    by_partition: dict[int, list[int]] = {}
    for (_, index), m in got:
        by_partition.setdefault(index, []).append(int(m.value()))
    return by_partition


# -- 1. internal topics wait for their replication factor ---------------------------------


def test_internal_topics_wait_for_enough_brokers_then_get_their_replication_factor(cluster: Cluster) -> None:
    for node in (2, 3):
        cluster.broker(node).stop()
    cluster.wait_for(lambda i: set(i.brokers) == {1} and i.controller is not None)
    port = cluster.broker(1).port
    for key_type in (0, 1):  # group, transaction
        answer = find_coordinator(port, unique("k"), key_type)
        assert answer.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE, answer
    with WireClient(port) as c:
        # An idempotent producer still gets its id (no internal topic involved, as in Kafka) ...
        init = c.call(REQUESTS[INIT_PRODUCER_ID](
            version=4, transactional_id=None, transaction_timeout_ms=60000, producer_id=-1,
            producer_epoch=-1), 4)
        assert init.error_code == ErrorCode.NONE and init.producer_id >= 0
        # ... and a topic auto-created with default.replication.factor 3 is a retriable wait.
        topic = unique("auto")
        meta = c.metadata([topic], version=4, auto_create=True)
        assert meta.topics[0].error_code == ErrorCode.LEADER_NOT_AVAILABLE, meta
    assert not any(t.startswith("__") for t in cluster.image().topics)
    for node in (2, 3):
        cluster.broker(node).start()
    cluster.wait_for(lambda i: len(i.brokers) == 3)
    group = unique("g")
    wait_until(lambda: find_coordinator(port, group).error_code == ErrorCode.NONE, timeout=30)
    offsets = cluster.image().topics["__consumer_offsets"]
    assert offsets.replication_factor == 3
    assert {n for replicas in offsets.assignment for n in replicas} == {1, 2, 3}


# -- 2. CreatePartitions --------------------------------------------------------------------


def test_create_partitions_through_a_non_controller_and_produce_to_the_new_ones(cluster: Cluster) -> None:
    topic = unique("grow")
    admin = AdminClient({"bootstrap.servers": non_controller(cluster)})
    admin.create_topics([NewTopic(topic, 2, 3)], operation_timeout=20)[topic].result(30)
    served_everywhere(cluster, topic, 2)
    produce_values(cluster.bootstrap, topic, list(range(0, 20)), 2)
    admin.create_partitions([NewPartitions(topic, 5)], operation_timeout=20)[topic].result(30)
    image = cluster.image()
    assert image.topics[topic].partitions == 5
    new_states = [image.partitions[(topic, p)] for p in (2, 3, 4)]
    assert {s.leader for s in new_states} == {1, 2, 3}
    assert all(len(set(s.replicas)) == 3 for s in new_states)
    served_everywhere(cluster, topic, 5)
    for b in cluster.brokers:
        assert all(b.partition_dir(topic, p).exists() for p in range(5)), b.bootstrap
    produce_values(cluster.bootstrap, topic, list(range(20, 70)), 5)
    got = read_values(cluster, topic, 5)
    assert sorted(v for vs in got.values() for v in vs) == list(range(70))
    assert all(got[p] for p in (2, 3, 4))
    shrink = admin.create_partitions([NewPartitions(topic, 4)], operation_timeout=20)[topic]
    with pytest.raises(Exception, match="INVALID_PARTITIONS"):
        shrink.result(30)


def test_a_topic_wider_than_one_etcd_transaction_is_created_and_grown(cluster: Cluster) -> None:
    """etcd refuses a transaction of more than 128 operations (its --max-txn-ops): a topic of
    300 partitions, grown to 450, is written in several, and served whole."""
    topic = unique("wide")
    admin = AdminClient({"bootstrap.servers": non_controller(cluster)})
    admin.create_topics([NewTopic(topic, 300, 3)], operation_timeout=30)[topic].result(40)
    assert cluster.image().topics[topic].partitions == 300
    admin.create_partitions([NewPartitions(topic, 450)], operation_timeout=30)[topic].result(40)
    served_everywhere(cluster, topic, 450)
    produce_values(cluster.bootstrap, topic, list(range(900)), 450)
    got = read_values(cluster, topic, 450)
    assert sorted(v for vs in got.values() for v in vs) == list(range(900))


# -- 3. manual replica assignments ------------------------------------------------------------

Manual = list[tuple[int, list[int]]]


def create_assigned(port: int, name: str, manual: Manual, partitions: int = -1, rf: int = -1) -> Any:
    """CreateTopics v5 (flexible) with `assignments`; the one topic's result."""
    cls = REQUESTS[CREATE_TOPICS]
    topic = cls.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=rf, configs=[],
        assignments=[cls.CreatableTopic.CreatableReplicaAssignment(partition_index=i, broker_ids=b)
                     for i, b in manual],
    )
    with WireClient(port) as c:
        answer = c.call(cls(version=5, topics=[topic], timeout_ms=20000, validate_only=False), 5)
    return answer.topics[0]


def add_assigned(port: int, name: str, count: int, manual: list[list[int]] | None) -> Any:
    """CreatePartitions v3 (flexible) with `assignments` (None: placed by the broker)."""
    cls = REQUESTS[CREATE_PARTITIONS]
    entries = None if manual is None else [cls.CreatePartitionsTopic.CreatePartitionsAssignment(broker_ids=b)
                                           for b in manual]
    request = cls(version=3, topics=[cls.CreatePartitionsTopic(name=name, count=count, assignments=entries)],
                  timeout_ms=20000, validate_only=False)
    with WireClient(port) as c:
        return c.call(request, 3).results[0]


def refused(result: Any, error: ErrorCode, message: str) -> bool:
    return (result.error_code, result.error_message) == (error, message)


@pytest.mark.parametrize(("manual", "partitions", "rf", "error", "message"), [
    ([(0, [1])], 1, -1, ErrorCode.INVALID_REQUEST,
     "A manual partition assignment was specified, but numPartitions was not set to -1."),
    ([(0, [1])], -1, 1, ErrorCode.INVALID_REQUEST,
     "A manual partition assignment was specified, but replication factor was not set to -1."),
    ([(0, [2])], -1, -1, BAD_ASSIGNMENT,
     "The manual partition assignment includes broker 2, but no such broker is registered."),
    ([(0, [1, 1])], -1, -1, BAD_ASSIGNMENT,
     "The manual partition assignment includes the broker 1 more than once."),
    ([(0, [1]), (0, [1])], -1, -1, BAD_ASSIGNMENT,
     "Found multiple manual partition assignments for partition 0"),
    ([(0, [1]), (1, [])], -1, -1, BAD_ASSIGNMENT,
     "The manual partition assignment includes an empty replica list."),
    ([(0, [1]), (2, [1])], -1, -1, BAD_ASSIGNMENT,
     "partitions should be a consecutive 0-based integer sequence"),
])
def test_single_broker_refuses_bad_create_topics_assignments(
    module_broker: BrokerProcess, manual: Manual, partitions: int, rf: int, error: ErrorCode, message: str,
) -> None:
    name = unique("bad")
    assert refused(create_assigned(module_broker.port, name, manual, partitions, rf), error, message)
    with WireClient(module_broker.port) as c:
        assert c.metadata([name], version=4).topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_single_broker_takes_its_own_id_in_assignments(module_broker: BrokerProcess) -> None:
    name = unique("own")
    created = create_assigned(module_broker.port, name, [(1, [1]), (0, [1])])
    assert (created.error_code, created.num_partitions, created.replication_factor) == (0, 2, 1)
    port = module_broker.port
    assert refused(add_assigned(port, name, 4, [[1]]), BAD_ASSIGNMENT,
                   "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified.")
    assert refused(add_assigned(port, name, 3, []), BAD_ASSIGNMENT,
                   "Attempted to add 1 additional partition(s), but only 0 assignment(s) were specified.")
    assert refused(add_assigned(port, name, 3, [[2]]), BAD_ASSIGNMENT,
                   "The manual partition assignment includes broker 2, but no such broker is registered.")
    assert refused(add_assigned(port, name, 3, [[1, 1]]), BAD_ASSIGNMENT,
                   "The manual partition assignment includes the broker 1 more than once.")
    assert add_assigned(port, name, 3, [[1]]).error_code == ErrorCode.NONE
    with WireClient(port) as c:
        assert len(c.metadata([name], version=4).topics[0].partitions) == 3
        assert partition_errors(c.produce(name, [(2, build_batch([b"x"]))])) == {2: ErrorCode.NONE}
        assert c.log_end_offset(name, 2) == 1


def test_cluster_takes_manual_assignments_and_refuses_bad_ones(cluster: Cluster) -> None:
    port = next(b.port for b in cluster.brokers if b.bootstrap == non_controller(cluster))
    name = unique("manual")
    inconsistent = create_assigned(port, name, [(0, [1, 2]), (1, [3])])
    assert refused(inconsistent, BAD_ASSIGNMENT, "The manual partition assignment includes a partition "
                   "with 1 replica(s), but this is not consistent with previous partitions, which have "
                   "2 replica(s).")
    assert refused(create_assigned(port, name, [(0, [1, 4])]), BAD_ASSIGNMENT,
                   "The manual partition assignment includes broker 4, but no such broker is registered.")
    assert name not in cluster.image().topics
    created = create_assigned(port, name, [(0, [3, 1]), (1, [2, 3])])
    assert (created.error_code, created.num_partitions, created.replication_factor) == (0, 2, 2)
    assert refused(add_assigned(port, name, 3, [[1, 2, 3]]), BAD_ASSIGNMENT,
                   "The manual partition assignment includes a partition with 3 replica(s), but this is "
                   "not consistent with previous partitions, which have 2 replica(s).")
    assert add_assigned(port, name, 3, [[1, 2]]).error_code == ErrorCode.NONE
    image = cluster.image()
    assert image.topics[name].assignment == ((3, 1), (2, 3), (1, 2))
    assert [image.partitions[(name, p)].leader for p in range(3)] == [3, 2, 1]
    served_everywhere(cluster, name, 3)
    produce_values(cluster.bootstrap, name, list(range(30)), 3)
    assert sorted(v for vs in read_values(cluster, name, 3).values() for v in vs) == list(range(30))
    for b in cluster.brokers:
        hosted = {p for p in range(3) if b.partition_dir(name, p).exists()}
        assert hosted == {p for p in range(3) if b.node_id in image.topics[name].assignment[p]}


# -- 4. automatic preferred-leader rebalance ---------------------------------------------------


def test_controller_gives_leadership_back_to_the_preferred_replica_by_itself(cluster: Cluster) -> None:
    controller = cluster.image().controller
    assert controller is not None
    preferred, *others = [n for n in (1, 2, 3) if n != controller.node_id] + [controller.node_id]
    name = unique("balance")
    replicas = [preferred, *others]
    created = create_assigned(cluster.broker(controller.node_id).port, name, [(0, replicas), (1, replicas)])
    assert created.error_code == ErrorCode.NONE
    served_everywhere(cluster, name, 2)
    produce_values(cluster.bootstrap, name, list(range(10)), 2)
    cluster.broker(preferred).pause()  # its session ends: leadership moves to another replica
    try:
        cluster.wait_for(lambda i: all(i.partitions[(name, p)].leader not in (preferred, -1) for p in (0, 1)))
    finally:
        cluster.restore()
    # No ElectLeaders: once the preferred replica is back in the ISR, the controller's
    # periodic check moves leadership back to it.
    image = cluster.wait_for(lambda i: all(i.partitions[(name, p)].leader == preferred for p in (0, 1)))
    assert all(preferred in image.partitions[(name, p)].isr for p in (0, 1))
    served_everywhere(cluster, name, 2)
    produce_values(cluster.bootstrap, name, list(range(10, 20)), 2)
    assert sorted(v for vs in read_values(cluster, name, 2).values() for v in vs) == list(range(20))


# -- 5. partition reassignment -------------------------------------------------------------------

ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS = 45, 46


def reassign_wire(port: int, topic: str, index: int, replicas: list[int] | None) -> Any:
    """AlterPartitionReassignments v0 for one partition; its result."""
    cls = REQUESTS[ALTER_REASSIGNMENTS]
    part = cls.ReassignableTopic.ReassignablePartition(partition_index=index, replicas=replicas)
    request = cls(version=0, timeout_ms=20000,
                  topics=[cls.ReassignableTopic(name=topic, partitions=[part])])
    with WireClient(port) as c:
        answer = c.call(request, 0)
    assert (answer.error_code, answer.error_message) == (ErrorCode.NONE, None)
    return answer.responses[0].partitions[0]


def list_wire(
    port: int, topics: list[tuple[str, list[int]]] | None
) -> dict[tuple[str, int], tuple[Any, ...]]:
    """ListPartitionReassignments v0: (replicas, adding, removing) by partition."""
    cls = REQUESTS[LIST_REASSIGNMENTS]
    wanted = None if topics is None else [
        cls.ListPartitionReassignmentsTopics(name=t, partition_indexes=p) for t, p in topics]
    with WireClient(port) as c:
        answer = c.call(cls(version=0, timeout_ms=20000, topics=wanted), 0)
    assert answer.error_code == ErrorCode.NONE
    return {(t.name, p.partition_index): (p.replicas, p.adding_replicas, p.removing_replicas)
            for t in answer.topics for p in t.partitions}


def test_single_broker_checks_reassignments_as_kafka(module_broker: BrokerProcess) -> None:
    port, name = module_broker.port, unique("solo")
    assert create_assigned(port, name, [(0, [1])]).error_code == ErrorCode.NONE
    assert reassign_wire(port, name, 0, [1]).error_code == ErrorCode.NONE  # already there
    assert refused(reassign_wire(port, name, 0, [2]), BAD_ASSIGNMENT,
                   "The manual partition assignment includes broker 2, but no such broker is registered.")
    assert refused(reassign_wire(port, name, 0, None), ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                   "No partition reassignment is in progress.")
    assert refused(reassign_wire(port, name, 1, [1]), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                   f"Unable to find partition {name}:1.")
    assert list_wire(port, None) == {}


def test_cluster_refuses_bad_reassignments(cluster: Cluster) -> None:
    port, name = cluster.broker(1).port, unique("badmove")
    assert create_assigned(port, name, [(0, [1, 2])]).error_code == ErrorCode.NONE
    for replicas, error, message in [
        ([], BAD_ASSIGNMENT, "The manual partition assignment includes an empty replica list."),
        ([1, 7], BAD_ASSIGNMENT,
         "The manual partition assignment includes broker 7, but no such broker is registered."),
        ([3, 1, 3], BAD_ASSIGNMENT, "The manual partition assignment includes the broker 3 more than once."),
        (None, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress."),
    ]:
        assert refused(reassign_wire(port, name, 0, replicas), error, message), replicas
    assert refused(reassign_wire(port, "no-such-topic", 0, [1]), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                   "Unable to find a topic named no-such-topic.")
    assert refused(reassign_wire(port, name, 5, [1]), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                   f"Unable to find partition {name}:5.")
    assert list_wire(port, [(name, [0])]) == {}


def test_reassignment_moves_replicas_and_the_data_with_them(cluster: Cluster) -> None:
    controller = cluster.image().controller
    assert controller is not None
    c, a, b = sorted((1, 2, 3), key=lambda n: n == controller.node_id)  # c: not the controller
    port, name = cluster.broker(controller.node_id).port, unique("move")
    assert create_assigned(port, name, [(0, [a, b]), (1, [a, b])]).error_code == ErrorCode.NONE
    served_everywhere(cluster, name, 2)
    produce_values(cluster.bootstrap, name, list(range(40)), 2)
    cluster.broker(c).pause()  # the new replica cannot catch up yet: the moves stay in progress
    try:
        assert reassign_wire(port, name, 0, [c, b]).error_code == ErrorCode.NONE
        assert reassign_wire(port, name, 1, [c, a]).error_code == ErrorCode.NONE
        assert list_wire(port, [(name, [0, 1, 7])]) == {
            (name, 0): ([c, b, a], [c], [a]), (name, 1): ([c, a, b], [c], [b]),
        }
        assert reassign_wire(port, name, 1, None).error_code == ErrorCode.NONE  # cancelled
        assert list_wire(port, None) == {(name, 0): ([c, b, a], [c], [a])}
    finally:
        cluster.broker(c).resume()
    # Broker c copies partition 0 by replication; once in the ISR the move completes: broker a
    # (the leader) leaves, c, the first target replica, leads, a's log is deleted.
    image = cluster.wait_for(lambda i: not i.partitions[(name, 0)].reassigning
                             and i.partitions[(name, 0)].replicas == (c, b))
    assert image.partitions[(name, 0)].leader == c
    assert image.partitions[(name, 1)].replicas == (a, b)
    wait_until(lambda: not cluster.broker(a).partition_dir(name, 0).exists(), timeout=20)
    # A real admin client moves partition 1 from a to c the same way.
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        moved = admin.alter_partition_reassignments({TopicPartition(name, 1): [b, c]})
        assert moved == {TopicPartition(name, 1): None}
        cluster.wait_for(lambda i: i.partitions[(name, 1)].replicas == (b, c)
                         and not i.partitions[(name, 1)].reassigning)
        assert admin.list_partition_reassignments() == {}
    finally:
        admin.close()
    wait_until(lambda: not cluster.broker(a).partition_dir(name, 1).exists(), timeout=20)
    served_everywhere(cluster, name, 2)
    produce_values(cluster.bootstrap, name, list(range(40, 60)), 2)
    got = read_values(cluster, name, 2)  # partition 0 led by c, partition 1 by b
    assert got[0] == list(range(0, 60, 2)) and got[1] == list(range(1, 60, 2))


def test_topic_configs_altered_through_any_broker_apply_on_every_leader(cluster: Cluster) -> None:
    """IncrementalAlterConfigs on a topic in the cluster (it used to close the connection):
    every broker describes the new value, and each partition's leader enforces it."""
    topic = cluster.create_topic(partitions=3)
    admin = AdminClient({"bootstrap.servers": non_controller(cluster)})
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("max.message.bytes", "2000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    for b in cluster.brokers:
        one = AdminClient({"bootstrap.servers": b.bootstrap})
        described = one.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
        entries = next(iter(described.values())).result(30)
        assert entries["max.message.bytes"].value == "2000", b.node_id
    p = Producer({"bootstrap.servers": cluster.bootstrap, "compression.type": "none",
                  "message.timeout.ms": 10000})
    errors: list[Any] = []
    for partition in range(3):  # three leaders
        p.produce(topic, b"x" * 5000, partition=partition, on_delivery=lambda err, _m: errors.append(err))
    p.flush(30)
    assert [e and e.code() for e in errors] == [KafkaError.MSG_SIZE_TOO_LARGE] * 3, errors


def test_a_raised_min_insync_replicas_applies_to_the_leader_at_once(cluster: Cluster) -> None:
    """min.insync.replicas raised to 3 on a live topic: once a follower is paused out of the
    ISR, the unchanged leader refuses acks=all (NOT_ENOUGH_REPLICAS)."""
    topic = cluster.create_topic(partitions=1)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("min.insync.replicas", "3", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    state = cluster.partition(topic, 0)
    follower = cluster.broker(next(n for n in state.replicas if n != state.leader))
    follower.pause()
    try:
        cluster.wait_for(lambda i: len(i.partitions[(topic, 0)].isr) == 2)
        # The store shows the shrink a moment before the leader hears of it; a batch that
        # arrives in between waits for the paused follower and times out, as on Kafka.
        with WireClient(cluster.broker(state.leader).port) as c:
            for _ in range(20):
                answer = c.produce(topic, [(0, build_batch([b"x"]))], acks=-1, timeout_ms=500)
                if partition_errors(answer) != {0: ErrorCode.REQUEST_TIMED_OUT}:
                    break
        assert partition_errors(answer) == {0: ErrorCode.NOT_ENOUGH_REPLICAS}, answer
    finally:
        follower.resume()
    cluster.wait_for(lambda i: len(i.partitions[(topic, 0)].isr) == 3, 30)
