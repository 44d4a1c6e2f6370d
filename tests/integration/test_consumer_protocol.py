"""The next-generation consumer group protocol (KIP-848) with real clients against one broker.

- confluent-kafka with ``group.protocol=consumer`` consumes and commits; ConsumerGroupDescribe
  and ListGroups show the group as Kafka does;
- two members share a topic, a third joins (confluent-kafka, and the Java 4.3 client):
  partitions move incrementally (revoked from their owner before another gets them) and every
  record is consumed and committed exactly once;
- a regular-expression subscription is resolved by the broker (Kafka's RE2/J full match);
- a static member (``group.instance.id``) restarted within its session gets its partitions back
  and the other member sees no rebalance;
- a member killed with SIGKILL is fenced when its session (the broker's
  ``group.consumer.session.timeout.ms``) lapses and the survivor takes its partitions;
- the broker killed (kill -9) and restarted: the coordinator reloads the group from its records
  in ``__consumer_offsets`` exactly (members, epochs, assignments) and the members carry on
  without a rebalance;
- the Java 4.3 client with ``group.protocol=consumer`` in a consume-transform-produce
  transaction (TxnOffsetCommit with the member epoch), halted mid-transaction and run again:
  the output is exactly once.
- the online upgrade and downgrade (``group.consumer.migration.policy``): the members of a
  classic group replaced one at a time by consumer-protocol ones and back (confluent-kafka, and
  the Java 4.3 client) while records flow: every record consumed and committed once, the group
  listed as classic, then consumer, then classic again; a group whose client-side assignor keeps
  user data in its assignments (librdkafka's cooperative-sticky) is not upgraded, as Kafka 4.3
  refuses it.

The broker's session timeout and heartbeat interval are small, so the waits are short. The
joining, killed-member and migration scenarios run against Apache Kafka 4.4.0 too, with the
same settings and checks.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import REQUESTS
from tests.integration.harness import (
    BrokerFactory,
    BrokerProcess,
    require_java,
    started_broker,
    unique_topic,
)
from tests.integration.kafka import KafkaNode, started_kafka
from tests.integration.shop import Shop, kill_processors
from tests.integration.test_groups_member import (
    Member,
    Members,
    balanced,
    committed_offsets,
    compile_group_member,
    create_topic,
    deliveries,
    end_offsets,
    phase_values,
    produce,
    wait_consumed,
    wait_for,
)
from tests.integration.wire import WireClient

pytestmark = pytest.mark.integration

LIB = "confluent-consumer"
PARTITIONS = 6
SESSION_MS = 3000
HEARTBEAT_MS = 300
OVERRIDES = {
    "offsets.topic.num.partitions": 3,
    "transaction.state.log.num.partitions": 3,
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
    "group.consumer.min.session.timeout.ms": 1000,
    "group.consumer.session.timeout.ms": SESSION_MS,
    "group.consumer.min.heartbeat.interval.ms": 100,
    "group.consumer.heartbeat.interval.ms": HEARTBEAT_MS,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200,
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with started_broker(tmp_path_factory.mktemp("kip848"), OVERRIDES) as b:
        yield b


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaNode]:
    kafka_overrides: dict[str, object] = {
        k: v for k, v in OVERRIDES.items() if not k.startswith("transaction.abort")
    }
    with started_kafka(tmp_path_factory.mktemp("kip848-kafka"), kafka_overrides) as node:
        yield node


Server = BrokerProcess | KafkaNode


@pytest.fixture(params=["gregor", "kafka"])
def server(request: pytest.FixtureRequest) -> Server:
    """Gregor, or Apache Kafka 4.4.0 for the same scenario."""
    return request.getfixturevalue("broker" if request.param == "gregor" else "kafka")  # type: ignore[no-any-return]


@pytest.fixture(params=[LIB, pytest.param("java-consumer", marks=pytest.mark.java)])
def lib(request: pytest.FixtureRequest) -> str:
    """The member's client: confluent-kafka, or the Java 4.3 client (java/GroupMember.java)."""
    return str(request.param)


@pytest.fixture
def members(request: pytest.FixtureRequest) -> Iterator[Members]:
    target: Server = request.getfixturevalue("server" if "server" in request.fixturenames else "broker")
    java = "lib" in request.fixturenames and request.getfixturevalue("lib") == "java-consumer"
    if "protocols" in request.fixturenames:
        java = request.getfixturevalue("protocols")[1] == "java-consumer"
    started = Members(target.bootstrap, compile_group_member("4.3") if java else None)
    try:
        yield started
    finally:
        started.close()
        kill_processors()


def new_topic(broker: Server, prefix: str) -> tuple[str, str]:
    topic = unique_topic(prefix)
    create_topic(broker.port, topic, PARTITIONS)
    return topic, f"group-{topic}"


def start(members: Members, group: str, topic: str, names: list[str], lib: str = LIB) -> list[Member]:
    return members.start(lib, group, topic, names, session_ms=SESSION_MS, heartbeat_ms=HEARTBEAT_MS)


def produce_and_consume(broker: Server, topic: str, ms: list[Member], tag: str) -> set[str]:
    values = phase_values(tag, {p: 5 for p in range(PARTITIONS)})
    produce(broker.bootstrap, topic, values)
    wanted = {v for vs in values.values() for v in vs}
    wait_consumed(ms, wanted)
    return wanted


def assert_once_and_committed(ms: list[Member], wanted: set[str]) -> None:
    seen = deliveries(ms)
    for value in wanted:
        got = seen.get(value, [])
        committed = [d for d in got if d[3]]
        assert len(committed) == 1, f"{value!r} delivered and committed {len(committed)} times: {got}"
    twice = {v: got for v, got in seen.items() if len(got) > 1}
    assert not twice, f"delivered more than once: {dict(list(twice.items())[:5])}"


def wait_committed_to_end(broker: Server, group: str, topic: str, ms: list[Member]) -> None:
    ends = end_offsets(broker.bootstrap, topic, PARTITIONS)
    wait_for(lambda: committed_offsets(broker.bootstrap, group, topic, PARTITIONS) == ends, 15,
             "the committed offsets at the end of every partition", ms)


def wait_balanced(members: list[Member], partitions: int, timeout: float = 30) -> dict[str, list[int]]:
    """The group's target reached: every partition owned once, spread evenly (the uniform
    assignor's target). A consumer-protocol group reconciles a partition at a time, so a moment
    where all are owned but not yet spread (the new member holding one, an old one three) is not
    the end; a CI run caught Kafka's group there."""

    def even() -> dict[str, list[int]] | None:
        current = balanced(members, partitions)
        sizes = [len(ps) for ps in (current or {}).values()]
        return current if current and max(sizes) - min(sizes) <= 1 else None

    return dict(wait_for(even, timeout, f"{partitions} partitions spread over {[m.name for m in members]}",
                         members))


def describe(broker: Server, group: str) -> Any:
    with WireClient(broker.port) as client:
        R = REQUESTS[ApiKey.CONSUMER_GROUP_DESCRIBE]
        return client.call(R(group_ids=[group], include_authorized_operations=False), 1).groups[0]


def listed_type(broker: Server, group: str) -> tuple[str, str] | None:
    with WireClient(broker.port) as client:
        answer = client.call(REQUESTS[ApiKey.LIST_GROUPS](states_filter=[], types_filter=[]), 5)
    found = [(g.group_type, g.group_state) for g in answer.groups if g.group_id == group]
    return found[0] if found else None


def test_one_member_consumes_commits_and_is_described(broker: BrokerProcess, members: Members) -> None:
    topic, group = new_topic(broker, "kip848-one")
    ms = start(members, group, topic, ["m1"])
    wait_balanced(ms, PARTITIONS)
    wanted = produce_and_consume(broker, topic, ms, "one")
    wait_committed_to_end(broker, group, topic, ms)
    assert_once_and_committed(ms, wanted)
    described = describe(broker, group)
    assert (described.error_code, described.group_state) == (ErrorCode.NONE, "Stable")
    [member] = described.members
    assert member.member_epoch == described.assignment_epoch == described.group_epoch >= 1
    owned = sorted(p for t in member.assignment.topic_partitions for p in t.partitions)
    assert owned == list(range(PARTITIONS))
    assert {t.topic_name for t in member.assignment.topic_partitions} == {topic}
    assert described.assignor_name == "uniform"
    assert listed_type(broker, group) == ("consumer", "Stable")
    assert not [e for m in ms for e in m.errors() if e["fatal"]]


def test_a_third_member_joins_incrementally_without_loss_or_duplicates(
    server: Server, lib: str, members: Members
) -> None:
    broker = server
    topic, group = new_topic(broker, "kip848-join")
    ms = start(members, group, topic, ["m1", "m2"], lib)
    before = wait_balanced(ms, PARTITIONS)
    assert sorted(len(ps) for ps in before.values()) == [3, 3]
    wanted = produce_and_consume(broker, topic, ms, "two")
    ms += start(members, group, topic, ["m3"], lib)
    after = wait_balanced(ms, PARTITIONS)
    assert sorted(len(ps) for ps in after.values()) == [2, 2, 2]
    for name in ("m1", "m2"):  # incremental: the old members only gave partitions up
        assert set(after[name]) <= set(before[name]), (before, after)
    wanted |= produce_and_consume(broker, topic, ms, "three")
    wait_committed_to_end(broker, group, topic, ms)
    assert_once_and_committed(ms, wanted)
    revoked = [e for m in ms[:2] for e in m.of("revoked")]
    assert revoked, "no partition was revoked from the first members"


def test_a_killed_member_is_fenced_and_its_partitions_move(server: Server, members: Members) -> None:
    broker = server
    topic, group = new_topic(broker, "kip848-kill")
    ms = start(members, group, topic, ["m1", "m2"])
    wait_balanced(ms, PARTITIONS)
    wanted = produce_and_consume(broker, topic, ms, "before")
    wait_committed_to_end(broker, group, topic, ms)
    ms[1].kill()
    survivor = [ms[0]]
    wait_balanced(survivor, PARTITIONS, timeout=SESSION_MS / 1000 + 10)
    wanted |= produce_and_consume(broker, topic, survivor, "after")
    wait_committed_to_end(broker, group, topic, survivor)
    assert_once_and_committed(ms, wanted)
    assert [m.member_id for m in describe(broker, group).members] == [
        survivor[0].last_assignment()["member"]  # type: ignore[index]
    ]


def _shape(described: Any) -> list[tuple[str, int, list[int]]]:
    return sorted(
        (m.member_id, m.member_epoch, sorted(p for t in m.assignment.topic_partitions for p in t.partitions))
        for m in described.members
    )


def test_a_coordinator_restart_reloads_the_group_exactly(broker_factory: BrokerFactory) -> None:
    own = broker_factory(OVERRIDES)
    topic, group = new_topic(own, "kip848-reload")
    members = Members(own.bootstrap, None)
    try:
        ms = start(members, group, topic, ["m1", "m2"])
        wait_balanced(ms, PARTITIONS)
        wanted = produce_and_consume(own, topic, ms, "before")
        wait_committed_to_end(own, group, topic, ms)
        before = describe(own, group)
        own.restart(clean=False)
        after = describe(own, group)
        assert (after.group_state, after.group_epoch, after.assignment_epoch) == (
            before.group_state, before.group_epoch, before.assignment_epoch)
        assert _shape(after) == _shape(before)
        wanted |= produce_and_consume(own, topic, ms, "after")
        wait_committed_to_end(own, group, topic, ms)
        assert_once_and_committed(ms, wanted)
        assert describe(own, group).group_epoch == before.group_epoch, "the members rebalanced"
    finally:
        members.close()


def test_a_static_member_restarted_within_its_session_keeps_its_partitions(
    server: Server, members: Members
) -> None:
    topic, group = new_topic(server, "kip848-static")
    a, b = members.start(LIB, group, topic, ["static-a", "static-b"], session_ms=SESSION_MS,
                         heartbeat_ms=HEARTBEAT_MS, static=True)
    before = wait_balanced([a, b], PARTITIONS)
    wanted = produce_and_consume(server, topic, [a, b], "first")
    b_events = len(b.of("assigned")) + len(b.of("revoked"))
    a.close()  # a static member leaves with epoch -2: its partitions wait for it
    (a2,) = members.start(LIB, group, topic, ["static-a"], session_ms=SESSION_MS,
                          heartbeat_ms=HEARTBEAT_MS, static=True)
    after = wait_balanced([a2, b], PARTITIONS)
    assert after == before, (before, after)
    wanted |= produce_and_consume(server, topic, [a2, b], "second")
    wait_committed_to_end(server, group, topic, [a2, b])
    assert_once_and_committed([a, a2, b], wanted)
    assert len(b.of("assigned")) + len(b.of("revoked")) == b_events, "the other member rebalanced"


def test_a_regular_expression_subscription_is_resolved_by_the_broker(broker: BrokerProcess) -> None:
    from confluent_kafka import Consumer

    prefix = unique_topic("rx")
    for suffix, partitions in (("-a", 2), ("-b", 1)):
        create_topic(broker.port, prefix + suffix, partitions)
    create_topic(broker.port, unique_topic("other"), 1)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"group-{prefix}",
                         "group.protocol": "consumer", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([f"^{prefix}-.*"])
        wanted = [(prefix + "-a", 0), (prefix + "-a", 1), (prefix + "-b", 0)]

        def assigned() -> bool:
            consumer.poll(0.1)
            return sorted((tp.topic, tp.partition) for tp in consumer.assignment()) == wanted

        wait_for(assigned, 15, f"{wanted} assigned", [])
    finally:
        consumer.close()


def test_bad_heartbeats_get_the_protocols_errors(broker: BrokerProcess) -> None:
    R = REQUESTS[ApiKey.CONSUMER_GROUP_HEARTBEAT]
    group = f"bad-{uuid.uuid4().hex[:8]}"
    cases = [
        (dict(member_id="m", member_epoch=0, subscribed_topic_names=["t"], topic_partitions=[]),
         ErrorCode.INVALID_REQUEST),  # no rebalance timeout in the first heartbeat
        (dict(member_id="m", member_epoch=0, rebalance_timeout_ms=1000, subscribed_topic_names=["t"],
              topic_partitions=[], server_assignor="sticky"), ErrorCode.UNSUPPORTED_ASSIGNOR),
        (dict(member_id="m", member_epoch=3), ErrorCode.GROUP_ID_NOT_FOUND),
        (dict(member_id="", member_epoch=0, rebalance_timeout_ms=1000, subscribed_topic_names=["t"],
              topic_partitions=[]), ErrorCode.INVALID_REQUEST),  # v1: the client names itself
    ]
    with WireClient(broker.port) as client:
        for fields, error in cases:
            answer = client.call(R(group_id=group, **fields), 1)
            assert answer.error_code == error, (fields, answer)
            assert answer.error_message


@pytest.mark.java
def test_java_consume_transform_produce_with_the_consumer_protocol(broker: BrokerProcess) -> None:
    require_java("4.3")
    shop = Shop(broker.bootstrap, purchases=120)
    txn_id = unique_topic("shop-kip848")
    for point in ("after_sends:2", "after_send_offsets:2"):
        run = shop.processor(txn_id, {"CRASH_AT": point}, java="4.3", batch=10, group_protocol="consumer")
        code = run.wait(90)
        assert code == 137 and run.of("crash"), f"exit {code}\n{run.transcript()}"
    final = shop.processor(txn_id, java="4.3", batch=20, group_protocol="consumer")
    assert final.wait(90) == 0 and final.of("done"), final.transcript()
    shop.assert_exactly_once()
    listed = listed_type(broker, shop.group)
    assert listed is not None and listed[0] == "consumer", listed
    kill_processors()


def replace_member(members: Members, live: list[Member], old: Member, group: str, topic: str,
                   name: str, lib: str) -> list[Member]:
    """``old`` closes (LeaveGroup or a leaving heartbeat) and a member of ``lib`` takes its place."""
    old.close()
    return [m for m in live if m is not old] + start(members, group, topic, [name], lib)


def wait_listed(broker: Server, group: str, live: list[Member], wanted: tuple[str, str]) -> None:
    """ListGroups' (type, state) of the group reaches ``wanted`` (members settle a heartbeat or
    a rejoin after their assignments)."""
    wait_for(lambda: listed_type(broker, group) == wanted, 15, f"{group} listed as {wanted}", live)


@pytest.fixture(params=[
    pytest.param(("confluent", LIB), id="confluent"),
    pytest.param(("java-classic", "java-consumer"), marks=pytest.mark.java, id="java"),
])
def protocols(request: pytest.FixtureRequest) -> tuple[str, str]:
    """A client's classic and consumer-protocol members: confluent-kafka's, or the Java 4.3 client's."""
    return request.param  # type: ignore[no-any-return]


def test_a_group_upgraded_and_downgraded_one_member_at_a_time_keeps_consuming(
    server: Server, protocols: tuple[str, str], members: Members
) -> None:
    """The online upgrade (Kafka's group.consumer.migration.policy, bidirectional by default):
    the first member restarted with group.protocol=consumer turns the classic group into a
    consumer group that still drives the classic member through JoinGroup / SyncGroup /
    Heartbeat; when the last member of the consumer protocol is replaced by a classic one, the
    group is classic again (the downgrade). The committed offsets stay, every record is consumed
    and committed once."""
    broker = server
    classic, consumer = protocols
    topic, group = new_topic(broker, "kip848-upgrade")
    live = start(members, group, topic, ["c1", "c2"], classic)
    wait_balanced(live, PARTITIONS)
    wanted = produce_and_consume(broker, topic, live, "classic")
    wait_committed_to_end(broker, group, topic, live)
    wait_listed(broker, group, live, ("classic", "Stable"))
    live = replace_member(members, live, live[0], group, topic, "n1", consumer)
    wait_balanced(live, PARTITIONS)
    wait_listed(broker, group, live, ("consumer", "Stable"))
    described = describe(broker, group)
    assert (described.error_code, len(described.members)) == (ErrorCode.NONE, 2)
    wanted |= produce_and_consume(broker, topic, live, "mixed")
    live = replace_member(members, live, live[0], group, topic, "n2", consumer)
    wait_balanced(live, PARTITIONS)
    wanted |= produce_and_consume(broker, topic, live, "upgraded")
    wait_listed(broker, group, live, ("consumer", "Stable"))
    # the downgrade: when the last member of the consumer protocol leaves, the group is classic again
    live = replace_member(members, live, live[0], group, topic, "c3", classic)
    wait_balanced(live, PARTITIONS)
    wanted |= produce_and_consume(broker, topic, live, "mixed-again")
    live = replace_member(members, live, live[0], group, topic, "c4", classic)
    wait_balanced(live, PARTITIONS)
    wanted |= produce_and_consume(broker, topic, live, "downgraded")
    wait_committed_to_end(broker, group, topic, live)
    assert_once_and_committed(members.started, wanted)
    wait_listed(broker, group, live, ("classic", "Stable"))
    assert not [e for m in members.started for e in m.errors() if e["fatal"]]
    if isinstance(broker, BrokerProcess):  # one line each in Gregor's log
        for way in ("upgraded to a consumer group", "downgraded to a classic group"):
            assert f"group {group}: {way}" in broker.log_text()


def test_a_group_whose_client_side_assignor_keeps_user_data_is_not_upgraded(
    server: Server, members: Members
) -> None:
    """librdkafka's cooperative-sticky assignor writes user data into each assignment, which a
    consumer group would lose: Kafka 4.3 refuses the upgrade (GROUP_ID_NOT_FOUND, fatal to the
    consumer-protocol member) and the classic group goes on.

    librdkafka's assignment carries the user data of the member's JoinGroup, which names the
    partitions and generation it held before; a member that joins before its first assignment
    has none. So c2 starts only once c1 owns the topic, and c1 joins the next generation with
    user data. Started together, both could join generation 2 before either was assigned
    (generations 1 and 2 were 8 ms apart), no assignment carried user data and the group was
    upgraded, as Kafka's check (ConsumerGroup.fromClassicGroup) would upgrade it too: a flake
    of 2 runs in 10."""
    broker = server
    topic, group = new_topic(broker, "kip848-no-upgrade")
    live = start(members, group, topic, ["c1"], "confluent-cooperative")
    wait_balanced(live, PARTITIONS)
    live += start(members, group, topic, ["c2"], "confluent-cooperative")
    wait_balanced(live, PARTITIONS)
    [refused] = start(members, group, topic, ["n1"], LIB)
    wait_for(lambda: any("group id does not exist" in e["error"] for e in refused.errors()),  # _FATAL
             20, "the consumer-protocol member refused", [refused])
    wanted = produce_and_consume(broker, topic, live, "still-classic")
    wait_committed_to_end(broker, group, topic, live)
    assert_once_and_committed(live, wanted)
    wait_listed(broker, group, live, ("classic", "Stable"))
