"""Consumer-group administration through real admin clients against a real broker.

Two groups on one 6-partition topic: `live` has two confluent-kafka members
(processes from test_groups_member.py) that consumed and committed everything,
so it is Stable with known members, assignments and committed offsets; `idle`
only has offsets, committed by a consumer that never joined, so it is Empty.
The confluent AdminClient, kafka-python's KafkaAdminClient and the Java Admin
(java/GroupAdmin.java) must all report the same: ListGroups (with a state
filter), DescribeGroups (state, protocol, members and their assignments),
OffsetFetch (the Java Admin and kafka-python ask for both groups in one
batched request) and DeleteGroups (refused while the group has members,
accepted once it is empty, after which the group and its offsets are gone).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient

from tests.integration.harness import (
    BrokerProcess,
    prefixed_json,
    require_java,
    run_java,
    started_broker,
)
from tests.integration.test_groups_member import (
    Member,
    Members,
    close_all,
    create_topic,
    phase_values,
    produce,
    wait_balanced,
    wait_consumed,
    wait_for,
)

pytestmark = pytest.mark.integration

PARTITIONS = 6
OVERRIDES = {
    "group.initial.rebalance.delay.ms": 0,
    "offsets.topic.num.partitions": 5,
    "group.min.session.timeout.ms": 1000,
}


@dataclass
class Groups:
    broker: BrokerProcess
    topic: str
    live: str
    idle: str
    members: list[Member]
    live_offsets: dict[int, int]
    idle_offsets: dict[int, int]


@pytest.fixture(scope="module")
def admin_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with started_broker(tmp_path_factory.mktemp("group-admin-broker"), OVERRIDES) as b:
        yield b


def commit_without_joining(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        c.close()


def start_live_group(
    broker: BrokerProcess, members: Members, topic: str, group: str
) -> tuple[list[Member], dict[int, int]]:
    ms = members.start("confluent", group, topic, ["m1", "m2"], session_ms=3000, heartbeat_ms=300)
    wait_balanced(ms, PARTITIONS)
    values = phase_values(group, {p: 3 + p for p in range(PARTITIONS)})
    produce(broker.bootstrap, topic, values)
    wait_consumed(ms, {v for vs in values.values() for v in vs})
    return ms, {p: len(vs) for p, vs in values.items()}


@pytest.fixture(scope="module")
def groups(admin_broker: BrokerProcess) -> Iterator[Groups]:
    topic = "admin-topic"
    create_topic(admin_broker.port, topic, PARTITIONS)
    members = Members(admin_broker.bootstrap, None)
    try:
        ms, live_offsets = start_live_group(admin_broker, members, topic, "live")
        idle_offsets = {0: 1, 2: 2, 5: 3}
        commit_without_joining(admin_broker.bootstrap, "idle", topic, idle_offsets)
        yield Groups(admin_broker, topic, "live", "idle", ms, live_offsets, idle_offsets)
    finally:
        members.close()


def member_assignments(g: Groups) -> dict[str, list[int]]:
    """member id -> partitions, as the members themselves were told."""
    out = {}
    for m in g.members:
        last = m.last_assignment()
        assert last is not None
        out[str(last["member"])] = list(last["tps"])
    return out


def wait_committed_everything(g: Groups) -> None:
    """The members commit after each batch; wait until the last commit has landed."""
    admin = AdminClient({"bootstrap.servers": g.broker.bootstrap})

    def done() -> bool:
        res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(g.live)])[g.live].result()
        return {tp.partition: tp.offset for tp in res.topic_partitions} == g.live_offsets

    wait_for(done, 15, "the live group's commits", g.members)


# -- confluent AdminClient ---------------------------------------------------------------------


def test_confluent_admin_lists_describes_and_fetches_offsets(groups: Groups) -> None:
    g = groups
    admin = AdminClient({"bootstrap.servers": g.broker.bootstrap})
    listed = admin.list_consumer_groups(request_timeout=15).result()
    assert not listed.errors
    states = {x.group_id: x.state for x in listed.valid}
    assert states == {g.live: ConsumerGroupState.STABLE, g.idle: ConsumerGroupState.EMPTY}
    stable = admin.list_consumer_groups(request_timeout=15, states={ConsumerGroupState.STABLE}).result()
    assert [x.group_id for x in stable.valid] == [g.live]
    # A group that only ever had offsets committed has no protocol type: a "simple" group.
    assert {x.group_id: x.is_simple_consumer_group for x in listed.valid} == {g.live: False, g.idle: True}

    described = {k: f.result() for k, f in admin.describe_consumer_groups([g.live, g.idle]).items()}
    live = described[g.live]
    assert live.state == ConsumerGroupState.STABLE
    assert live.partition_assignor == "range"
    assert live.coordinator.id == 1
    got = {m.member_id: sorted(tp.partition for tp in m.assignment.topic_partitions) for m in live.members}
    assert got == member_assignments(g)
    assert {m.client_id for m in live.members} == {"rdkafka"}
    idle = described[g.idle]
    assert (idle.state, idle.members) == (ConsumerGroupState.EMPTY, [])

    wait_committed_everything(g)
    for group, expected in [(g.live, g.live_offsets), (g.idle, g.idle_offsets)]:
        res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result()
        assert all(tp.error is None for tp in res.topic_partitions)
        assert {tp.partition: tp.offset for tp in res.topic_partitions if tp.topic == g.topic} == expected

    with pytest.raises(KafkaException) as refused:
        admin.delete_consumer_groups([g.live], request_timeout=15)[g.live].result()
    assert refused.value.args[0].name() == "NON_EMPTY_GROUP"


# -- kafka-python KafkaAdminClient -------------------------------------------------------------


@pytest.fixture
def kp_admin(groups: Groups) -> Iterator[KafkaAdminClient]:
    admin = KafkaAdminClient(bootstrap_servers=groups.broker.bootstrap)
    try:
        yield admin
    finally:
        admin.close()


def test_kafka_python_admin_lists_describes_and_fetches_offsets(
    groups: Groups, kp_admin: KafkaAdminClient
) -> None:
    g = groups
    listed = {x["group_id"]: (x["protocol_type"], x["group_state"]) for x in kp_admin.list_groups()}
    assert listed == {g.live: ("consumer", "Stable"), g.idle: ("", "Empty")}
    assert [x["group_id"] for x in kp_admin.list_groups(states_filter=["Empty"])] == [g.idle]

    described = kp_admin.describe_groups([g.live, g.idle])
    live = described[g.live]
    assert (live["error"], live["group_state"], live["protocol_type"], live["protocol_data"]) == (
        None,
        "Stable",
        "consumer",
        "range",
    )
    got = {}
    for m in live["members"]:
        assert m["member_metadata"]["topics"] == [g.topic]
        (assigned,) = m["member_assignment"]["assigned_partitions"]
        assert assigned["topic"] == g.topic
        got[m["member_id"]] = sorted(assigned["partitions"])
    assert got == member_assignments(g)
    idle = described[g.idle]
    assert (idle["group_state"], idle["members"]) == ("Empty", [])

    wait_committed_everything(g)
    offsets = kp_admin.list_group_offsets([g.live, g.idle, "no-such-group"])  # one batched OffsetFetch
    as_dict = {grp: {tp.partition: om.offset for tp, om in tps.items()} for grp, tps in offsets.items()}
    assert as_dict == {g.live: g.live_offsets, g.idle: g.idle_offsets, "no-such-group": {}}

    assert kp_admin.delete_groups([g.live]) == {g.live: "NonEmptyGroupError"}


# -- Java Admin ------------------------------------------------------------------------------------


def java_group_admin(bootstrap: str, groups: list[str]) -> dict[str, Any]:
    require_java()
    proc = run_java("GroupAdmin.java", bootstrap, *groups, timeout=120)
    results = prefixed_json(proc.stdout)
    assert proc.returncode == 0 and results, (
        f"GroupAdmin failed ({proc.returncode})\n{proc.stdout}\n{proc.stderr[-3000:]}"
    )
    return dict(results[0])


@pytest.mark.java
def test_java_admin_lists_describes_and_fetches_offsets_of_two_groups_at_once(groups: Groups) -> None:
    g = groups
    wait_committed_everything(g)
    got = java_group_admin(g.broker.bootstrap, [g.live, g.idle])
    assert got["list"] == {g.live: "Stable", g.idle: "Empty"}
    assert got["describe"][g.live]["state"] == "Stable"
    assert got["describe"][g.live]["assignor"] == "range"
    assert got["describe"][g.live]["members"] == member_assignments(g)
    assert got["describe"][g.idle] == {"state": "Empty", "assignor": "", "members": {}}
    assert got["offsets"] == {
        g.live: {f"{g.topic}:{p}": o for p, o in g.live_offsets.items()},
        g.idle: {f"{g.topic}:{p}": o for p, o in g.idle_offsets.items()},
    }


# -- deleting a group once it is empty ---------------------------------------------------------------


@pytest.mark.parametrize("admin_lib", ["confluent", "kafka-python"])
def test_delete_group_once_empty(admin_lib: str, groups: Groups) -> None:
    broker, topic, group = groups.broker, groups.topic, f"doomed-{admin_lib}"
    members = Members(broker.bootstrap, None)
    try:
        ms, _offsets = start_live_group(broker, members, topic, group)
        confluent = AdminClient({"bootstrap.servers": broker.bootstrap})
        close_all(ms)  # LeaveGroup: the group is Empty at once, its offsets stay
        assert confluent.describe_consumer_groups([group])[group].result().state == ConsumerGroupState.EMPTY

        if admin_lib == "confluent":
            assert confluent.delete_consumer_groups([group], request_timeout=15)[group].result() is None
        else:
            kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
            try:
                assert kp.delete_groups([group]) == {group: "OK"}
            finally:
                kp.close()

        listed = {x.group_id for x in confluent.list_consumer_groups(request_timeout=15).result().valid}
        assert group not in listed and groups.live in listed
        gone = confluent.describe_consumer_groups([group])[group].result()
        assert (gone.state, gone.members) == (ConsumerGroupState.DEAD, [])
        res = confluent.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result()
        assert [tp for tp in res.topic_partitions if tp.offset >= 0] == []
    finally:
        members.close()
