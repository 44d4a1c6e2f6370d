"""Consumer groups through four real clients against a real broker process.

Each member is its own process (tests/integration/test_groups_member.py for
confluent-kafka, kafka-python and aiokafka; java/GroupMember.java for the
Apache Kafka Java client), subscribed to a 6-partition topic with manual
synchronous commits after every batch, reporting its assignments, batches and
errors as JSON lines. So a member can leave (close), die (SIGKILL) or be
restarted, and every check is on what the clients themselves saw.

- three members split the partitions (each owned by exactly one member) and
  consume every record exactly once;
- a member that leaves, or dies, has its partitions taken over (for a death,
  within the session timeout) and the others consume new records exactly once;
  nothing a member committed is delivered again;
- committed offsets resume exactly: new consumers, and new consumers after a
  clean broker restart and after a kill -9 of the broker, start at the
  committed offsets (no re-delivery, nothing skipped);
- static membership: a static member that restarts with the same
  group.instance.id gets its partitions back without a rebalance of the other
  member; a second process with an instance id already in use fences the first
  (FENCED_INSTANCE_ID).

Records are ASCII words "<phase>-p<partition>-<i>", produced with explicit
partitions after the group is balanced, so every record's owner is known.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.harness import (
    BrokerFactory,
    BrokerProcess,
    started_broker,
    unique_topic,
    wait_until,
)
from tests.integration.test_groups_member import (
    LIBS,
    Member,
    Members,
    close_all,
    committed_offsets,
    compile_group_member,
    create_topic,
    deliveries,
    end_offsets,
    phase_values,
    produce,
    wait_balanced,
    wait_consumed,
    wait_for,
)

pytestmark = pytest.mark.integration

PARTITIONS = 6
SESSION_MS = 3000
HEARTBEAT_MS = 300
STATIC_SESSION_MS = 20_000  # long enough for a member JVM to restart inside it
GROUP_BROKER_OVERRIDES = {
    "group.initial.rebalance.delay.ms": 0,
    "offsets.topic.num.partitions": 5,
    "group.min.session.timeout.ms": 1000,
}


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with started_broker(tmp_path_factory.mktemp("group-broker"), GROUP_BROKER_OVERRIDES) as b:
        yield b


@pytest.fixture(scope="module")
def java_classes() -> Path:
    return compile_group_member()


@pytest.fixture(params=[pytest.param(x, marks=pytest.mark.java) if x == "java" else x for x in LIBS])
def lib(request: pytest.FixtureRequest) -> str:
    if request.param == "java":
        request.getfixturevalue("java_classes")
    return str(request.param)


def spawner(request: pytest.FixtureRequest, broker: BrokerProcess, lib: str) -> Iterator[Members]:
    classes = request.getfixturevalue("java_classes") if lib == "java" else None
    members = Members(broker.bootstrap, classes)
    try:
        yield members
    finally:
        members.close()


@pytest.fixture
def members(request: pytest.FixtureRequest, group_broker: BrokerProcess, lib: str) -> Iterator[Members]:
    yield from spawner(request, group_broker, lib)


def new_topic(broker: BrokerProcess, prefix: str) -> tuple[str, str]:
    topic = unique_topic(prefix)
    create_topic(broker.port, topic, PARTITIONS)
    return topic, f"group-{topic}"


def all_values(values: dict[int, list[str]]) -> set[str]:
    return {v for vs in values.values() for v in vs}


def start_balanced(members: Members, lib: str, group: str, topic: str, names: list[str]) -> list[Member]:
    ms = members.start(lib, group, topic, names, session_ms=SESSION_MS, heartbeat_ms=HEARTBEAT_MS)
    wait_balanced(ms, PARTITIONS)
    return ms


def owner_of(ms: list[Member]) -> dict[int, str]:
    return {p: m.name for m in ms for p in m.current()}


def assert_exactly_once(
    ms: list[Member], values: dict[int, list[str]], owners: dict[int, str] | None = None
) -> None:
    """Each value delivered once, committed, at its produced offset order, to its partition's owner."""
    seen = deliveries(ms)
    for p, vs in values.items():
        offsets = []
        for v in vs:
            got = seen.get(v, [])
            assert len(got) == 1, f"{v!r} delivered {len(got)} times: {got}"
            name, part, offset, committed = got[0]
            assert part == p, f"{v!r} produced to partition {p}, consumed from {part}"
            assert committed, f"{v!r}: the commit after its batch failed"
            if owners is not None:
                assert name == owners[p], f"{v!r} (partition {p}) consumed by {name}, owner is {owners[p]}"
            offsets.append(offset)
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets), (
            f"partition {p}: offsets {offsets}"
        )


def assert_redelivered_only_if_uncommitted(ms: list[Member]) -> None:
    """At least once: a value delivered twice was first delivered in a batch whose commit failed."""
    for v, got in deliveries(ms).items():
        if len(got) > 1:
            assert not any(ok for *_x, ok in got[:-1]), f"{v!r} was committed, then delivered again: {got}"


def wait_committed(bootstrap: str, group: str, topic: str, timeout: float = 15) -> dict[int, int]:
    """Wait until the group's committed offsets reach the end of every partition."""
    ends = end_offsets(bootstrap, topic, PARTITIONS)
    deadline = time.monotonic() + timeout
    while True:
        got = committed_offsets(bootstrap, group, topic, PARTITIONS)
        if got == ends:
            return got
        assert time.monotonic() < deadline, f"committed offsets {got} never reached the end offsets {ends}"
        time.sleep(0.1)


# -- 1. three members split the partitions --------------------------------------------------------


def test_three_members_split_partitions_and_consume_exactly_once(
    lib: str, group_broker: BrokerProcess, members: Members
) -> None:
    topic, group = new_topic(group_broker, "split")
    ms = start_balanced(members, lib, group, topic, ["m1", "m2", "m3"])
    owners = owner_of(ms)
    assert sorted(owners) == list(range(PARTITIONS))
    assert sorted(len(m.current()) for m in ms) == [2, 2, 2], {m.name: m.current() for m in ms}

    values = phase_values("split", {p: 10 + 3 * p for p in range(PARTITIONS)})
    produce(group_broker.bootstrap, topic, values)
    wait_consumed(ms, all_values(values))
    assert wait_committed(group_broker.bootstrap, group, topic) == {p: len(vs) for p, vs in values.items()}
    assert owner_of(ms) == owners, "the group rebalanced while nobody joined or left"
    assert_exactly_once(ms, values, owners)
    assert not [e for m in ms for e in m.errors() if e["fatal"]]


# -- 2. a member leaves, a member dies ---------------------------------------------------------------


def produce_phase(broker: BrokerProcess, topic: str, ms: list[Member], tag: str) -> dict[int, list[str]]:
    """Five values `tag`-* a partition, produced and then consumed by `ms`."""
    values = phase_values(tag, {p: 5 for p in range(PARTITIONS)})
    produce(broker.bootstrap, topic, values)
    wait_consumed(ms, all_values(values))
    return values


def assert_rest_took_over(
    broker: BrokerProcess, topic: str, ms: list[Member], rest: list[Member], before: dict[int, list[str]]
) -> None:
    """After one of `ms` left: `rest` consume new values exactly once and nothing was lost."""
    after = produce_phase(broker, topic, rest, "after")
    assert_exactly_once(rest, after, owner_of(rest))
    assert {v for m in ms for v in m.values()} >= all_values(before)
    assert_redelivered_only_if_uncommitted(ms)


def test_member_leaves_and_the_others_take_over(
    lib: str, group_broker: BrokerProcess, members: Members
) -> None:
    topic, group = new_topic(group_broker, "leave")
    ms = start_balanced(members, lib, group, topic, ["m1", "m2", "m3"])
    before = produce_phase(group_broker, topic, ms, "before")
    leaving, rest = ms[2], ms[:2]
    orphaned = leaving.current()

    t0 = time.monotonic()
    leaving.close()  # LeaveGroup: the others rebalance at their next heartbeat, not after a session timeout
    split = wait_balanced(rest, PARTITIONS, timeout=SESSION_MS / 1000)
    took = time.monotonic() - t0
    print(f"{lib}: rebalanced {split} {took:.2f}s after the close of {leaving.name} (owned {orphaned})")
    assert_rest_took_over(group_broker, topic, ms, rest, before)


def test_member_dies_and_the_others_take_over_within_session_timeout(
    lib: str, group_broker: BrokerProcess, members: Members
) -> None:
    topic, group = new_topic(group_broker, "die")
    ms = start_balanced(members, lib, group, topic, ["m1", "m2", "m3"])
    before = produce_phase(group_broker, topic, ms, "before")
    dying, rest = ms[2], ms[:2]
    orphaned = dying.current()

    t0 = time.monotonic()
    dying.kill()
    # The coordinator notices after SESSION_MS without a heartbeat; the others
    # rejoin at their next heartbeat. Allow a few heartbeats of slack.
    limit = SESSION_MS / 1000 + 10 * HEARTBEAT_MS / 1000
    split = wait_balanced(rest, PARTITIONS, timeout=limit)
    took = time.monotonic() - t0
    print(f"{lib}: rebalanced {split} {took:.2f}s after the kill of {dying.name} (owned {orphaned})")
    assert took > SESSION_MS / 1000 * 0.5, "the dead member was dropped before its session could time out"
    assert_rest_took_over(group_broker, topic, ms, rest, before)


# -- 3. committed offsets resume exactly --------------------------------------------------------------


@pytest.fixture
def restart_broker(broker_factory: BrokerFactory) -> BrokerProcess:
    return broker_factory(GROUP_BROKER_OVERRIDES)


@pytest.fixture
def restart_members(
    request: pytest.FixtureRequest, restart_broker: BrokerProcess, lib: str
) -> Iterator[Members]:
    yield from spawner(request, restart_broker, lib)


def test_committed_offsets_resume_after_consumer_and_broker_restarts(
    lib: str, restart_broker: BrokerProcess, restart_members: Members
) -> None:
    broker = restart_broker
    topic, group = new_topic(broker, "resume")
    everything: set[str] = set()
    committed = {p: -1 for p in range(PARTITIONS)}
    for phase, restart in [("first", None), ("again", None), ("sigterm", "clean"), ("kill9", "kill9")]:
        if restart is not None:
            broker.restart(clean=restart == "clean")
            assert committed_offsets(broker.bootstrap, group, topic, PARTITIONS) == committed, (
                f"committed offsets changed across the {restart} broker restart"
            )
        # The backlog waits for the next run of consumers: they must start at the committed offsets.
        values = phase_values(phase, {p: 4 + p for p in range(PARTITIONS)})
        produce(broker.bootstrap, topic, values)
        everything |= all_values(values)
        ms = start_balanced(restart_members, lib, group, topic, [f"{phase}1", f"{phase}2", f"{phase}3"])
        wait_consumed(ms, all_values(values))
        assert_exactly_once(ms, values)
        starts: dict[int, int] = {}
        for _name, p, o, _ok in (d for ds in deliveries(ms).values() for d in ds):
            starts[p] = min(starts.get(p, o), o)
        expected = {p: max(c, 0) for p, c in committed.items()}
        assert starts == expected, (
            f"{phase}: started at offsets {starts}, the committed ones were {committed}"
        )
        committed = wait_committed(broker.bootstrap, group, topic)
        close_all(ms)
        assert {v for m in ms for v in m.values()} == all_values(values), (
            f"{phase}: re-delivered older records"
        )
    assert committed == {p: 4 * (4 + p) for p in range(PARTITIONS)}
    assert len(everything) == 4 * sum(4 + p for p in range(PARTITIONS))


# -- 5. static membership ---------------------------------------------------------------------------


def start_static(members: Members, lib: str, group: str, topic: str, names: list[str]) -> list[Member]:
    return members.start(
        lib, group, topic, names, session_ms=STATIC_SESSION_MS, heartbeat_ms=HEARTBEAT_MS, static=True
    )


def rebalance_events(m: Member) -> int:
    return len(m.of("assigned")) + len(m.of("revoked"))


def test_static_member_restart_gets_its_partitions_back_without_rebalance(
    lib: str, group_broker: BrokerProcess, members: Members
) -> None:
    topic, group = new_topic(group_broker, "static")
    a, b = start_static(members, lib, group, topic, ["static-a", "static-b"])
    wait_balanced([a, b], PARTITIONS)
    first = phase_values("first", {p: 5 for p in range(PARTITIONS)})
    produce(group_broker.bootstrap, topic, first)
    wait_consumed([a, b], all_values(first))
    a_assignment, b_assignment = a.last_assignment(), b.last_assignment()
    assert a_assignment and b_assignment
    b_events = rebalance_events(b)

    a.close()  # a static member does not send LeaveGroup on close
    (a2,) = start_static(members, lib, group, topic, ["static-a"])
    wait_for(lambda: a2.current(), 30, "the restarted static member's assignment", [a2, b])
    again = a2.last_assignment()
    assert again is not None
    assert again["tps"] == a_assignment["tps"], f"restarted static member got {again} (had {a_assignment})"
    if again["gen"] is not None:
        assert again["gen"] == a_assignment["gen"], f"generation moved: {a_assignment} -> {again}"

    second = phase_values("second", {p: 5 for p in range(PARTITIONS)})
    produce(group_broker.bootstrap, topic, second)
    wait_consumed([a2, b], all_values(second))
    assert rebalance_events(b) == b_events, f"the other member went through a rebalance\n{b.describe()}"
    assert b.last_assignment() == b_assignment
    owners = {p: m.name for m in (a2, b) for p in m.current()}
    assert_exactly_once([a, a2, b], first)
    assert_exactly_once([a2, b], second, owners)


def fence_evidence(lib: str, first: Member, member_id: str) -> list[dict[str, Any]]:
    """What the first holder of an instance id shows once a second process took it over.

    - confluent: librdkafka raises a fatal error (_FATAL, "Static consumer fenced ...");
    - java: poll() throws FencedInstanceIdException;
    - kafka-python: its heartbeat thread gets FENCED_INSTANCE_ID but only logs it and
      stops heartbeating; what the application sees is its next commit failing with
      FencedInstanceIdError;
    - aiokafka: sends Heartbeat v1 (no group.instance.id field), so the broker can
      only answer UNKNOWN_MEMBER_ID; aiokafka then rejoins with the instance id and
      fences the other one in turn: it shows up as a re-join under a new member id.
    """
    if lib == "aiokafka":
        return [e for e in first.of("assigned") if e["member"] != member_id]
    fenced = [e for e in first.errors() if "fenced" in e["error"].lower()]
    if lib == "kafka-python":
        fenced = [e for e in first.of("batch") if "fencedinstanceid" in (e["commit_error"] or "").lower()]
    if lib == "confluent":
        fenced = [e for e in fenced if e["error"].startswith("_FATAL")]
    if lib == "java":
        fenced = [e for e in fenced if e["fatal"] and "FencedInstanceIdException" in e["error"]]
    return fenced


def test_duplicate_static_instance_fences_the_first(
    lib: str, group_broker: BrokerProcess, members: Members
) -> None:
    topic, group = new_topic(group_broker, "fence")
    a, b = start_static(members, lib, group, topic, ["static-a", "static-b"])
    wait_balanced([a, b], PARTITIONS)
    a_assignment, b_assignment = a.last_assignment(), b.last_assignment()
    assert a_assignment and b_assignment
    b_events = rebalance_events(b)

    (intruder,) = start_static(members, lib, group, topic, ["static-a"])  # while the first static-a lives
    wait_for(lambda: intruder.current(), 30, "the second static-a's assignment", [a, intruder, b])
    got = intruder.last_assignment()
    assert got is not None and got["tps"] == a_assignment["tps"], (
        f"second static-a got {got}, first had {a_assignment}"
    )

    later = phase_values("later", {p: 5 for p in range(PARTITIONS)})
    produce(group_broker.bootstrap, topic, later)
    fenced = wait_for(
        lambda: fence_evidence(lib, a, a_assignment["member"]),
        STATIC_SESSION_MS / 1000,
        "the first static-a to show it was fenced",
        [a, intruder, b],
    )
    print(f"{lib}: the first static-a showed {fenced[0]}")

    if lib == "aiokafka":  # the two static-a take the member id from each other, see fence_evidence
        wait_consumed([a, intruder, b], all_values(later))
    else:
        wait_consumed([intruder, b], all_values(later))
        zombie_commits = [(p, o, v) for p, o, v, ok in a.got() if ok and v.startswith("later-")]
        assert not zombie_commits, f"the fenced member committed {zombie_commits}"
        assert_exactly_once([intruder, b], later, {p: m.name for m in (intruder, b) for p in m.current()})
    assert rebalance_events(b) == b_events, f"the other member went through a rebalance\n{b.describe()}"
    assert b.last_assignment() == b_assignment



def test_a_member_without_a_common_protocol_is_refused_and_the_refusal_logged(
    group_broker: BrokerProcess,
) -> None:
    """A confluent-kafka consumer offering only `roundrobin` to a group whose member chose
    `range` is refused INCONSISTENT_GROUP_PROTOCOL, as Kafka refuses it; the coordinator logs
    the refusal with what it offered and what the group has (chaos runs saw librdkafka
    consumers refused so for minutes, with nothing to tell why)."""
    from confluent_kafka import Consumer

    topic, group = unique_topic("inconsistent"), unique_topic("inconsistent-group")
    create_topic(group_broker.port, topic, 1)
    settings = {"bootstrap.servers": group_broker.bootstrap, "group.id": group,
                "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS}
    first = Consumer({**settings, "partition.assignment.strategy": "range"})
    second = Consumer({**settings, "partition.assignment.strategy": "roundrobin"})
    errors: list[str] = []

    def polled_error(consumer: Any) -> None:
        message = consumer.poll(0.2)
        if message is not None and message.error() is not None:
            errors.append(message.error().name())

    try:
        first.subscribe([topic])
        wait_until(lambda: polled_error(first) or bool(first.assignment()), timeout=20,
                   msg="the first member assigned")
        second.subscribe([topic])
        wait_until(lambda: polled_error(second) or "INCONSISTENT_GROUP_PROTOCOL" in errors, timeout=20,
                   msg=f"the second member refused (its errors: {errors})")
        logged = (f"group {group}: JoinGroup v", "refused INCONSISTENT_GROUP_PROTOCOL: it offers type "
                  "'consumer', ['roundrobin']; the group is STABLE, type 'consumer', members ", "['range']")
        wait_until(lambda: any(all(part in line for part in logged)
                               for line in group_broker.log_text().splitlines()),
                   timeout=10, msg=f"the refusal in the broker's log: {logged}")
    finally:
        first.close()
        second.close()
