"""One consumer-group member per process, for the consumer-group integration tests.

Not a test module (it defines no tests): it is the member process of
test_groups_clients.py and test_groups_admin.py, plus the `Member` handle the
tests use to start, watch, close and kill one.

A member is a real client's group consumer (confluent-kafka, kafka-python,
aiokafka, or the Java KafkaConsumer through java/GroupMember.java) subscribed
to one topic with manual commits: after each polled batch it commits the next
offset of every partition in the batch synchronously, then reports the batch.
So a reported batch without a commit error is committed; a member killed
between poll and commit has reported nothing of that batch.

    python -m tests.integration.test_groups_member LIB BOOTSTRAP GROUP TOPIC
        SESSION_MS HEARTBEAT_MS [INSTANCE_ID]

It writes one JSON event per line on stdout, prefixed "@@ ":

    {"ev": "ready"}                                    subscribed
    {"ev": "assigned", "tps": [...], "gen": G, "member": M}   gen/member null when the client hides them
    {"ev": "revoked", "tps": [...]}
    {"ev": "batch", "recs": [[partition, offset, value], ...], "commit_error": null | "..."}
    {"ev": "error", "fatal": bool, "error": "..."}     a client error (librdkafka error_cb, a poll exception)
    {"ev": "closed"}                                   after close(), just before exiting

and reads commands on stdin: "close" (close the consumer: a dynamic member
leaves the group, a static one does not) and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
LIBS = ["confluent", "kafka-python", "aiokafka", "java"]
POLL_S = 0.1
KAFKA_PYTHON_POLL_MS = 2000
MAX_POLL_INTERVAL_MS = 10_000  # also the rebalance timeout of the Java and kafka-python members


# -- the member process ---------------------------------------------------------------------


def emit(ev: str, **fields: Any) -> None:
    sys.stdout.write("@@ " + json.dumps({"ev": ev, **fields}) + "\n")
    sys.stdout.flush()


def stdin_commands() -> queue.Queue[str]:
    q: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in sys.stdin:
            q.put(line.strip())
        q.put("close")  # the test went away: close

    threading.Thread(target=pump, daemon=True).start()
    return q


def close_requested(q: queue.Queue[str]) -> bool:
    try:
        return q.get_nowait() == "close"
    except queue.Empty:
        return False


def batch_offsets(recs: list[list[Any]]) -> dict[int, int]:
    """Next offset to commit per partition of a batch."""
    nxt: dict[int, int] = {}
    for p, o, _v in recs:
        nxt[p] = max(nxt.get(p, 0), o + 1)
    return nxt


def run_confluent(
    bootstrap: str, group: str, topic: str, session_ms: int, hb_ms: int, inst: str | None,
    protocol: str = "classic", strategy: str | None = None,
) -> None:
    """``protocol`` "consumer": KIP-848's group protocol, the broker's session timeout and
    heartbeat interval (librdkafka refuses its own with it); ``strategy``: the classic
    protocol's partition.assignment.strategy (librdkafka's default: range,roundrobin)."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    timeouts = {"session.timeout.ms": session_ms, "heartbeat.interval.ms": hb_ms}
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        **(timeouts if protocol == "classic" else {"group.protocol": "consumer"}),
        "max.poll.interval.ms": max(MAX_POLL_INTERVAL_MS, session_ms),
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
        "retry.backoff.ms": 50,
        "error_cb": lambda err: emit("error", fatal=err.fatal(), error=f"{err.name()}: {err.str()}"),
    }
    if inst:
        conf["group.instance.id"] = inst
    if strategy:
        conf["partition.assignment.strategy"] = strategy
    c = Consumer(conf)

    incremental = protocol == "consumer" or strategy == "cooperative-sticky"

    def on_assign(_c: Any, tps: list[Any]) -> None:  # librdkafka does not expose the generation
        added = {tp.partition for tp in tps}
        if incremental:  # the callback names only the partitions added
            added |= {tp.partition for tp in c.assignment()}
        emit("assigned", tps=sorted(added), gen=None, member=c.memberid())

    def on_revoke(_c: Any, tps: list[Any]) -> None:
        emit("revoked", tps=sorted(tp.partition for tp in tps))

    c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    emit("ready")
    cmds = stdin_commands()
    while not close_requested(cmds):
        try:
            msgs = c.consume(500, POLL_S)
        except KafkaException as e:
            emit("error", fatal=True, error=str(e))
            time.sleep(POLL_S)
            continue
        recs = []
        for m in msgs:
            if m.error():
                emit("error", fatal=m.error().fatal(), error=f"{m.error().name()}: {m.error().str()}")
            else:
                recs.append([m.partition(), m.offset(), m.value().decode()])
        if recs:
            offsets = [TopicPartition(topic, p, o) for p, o in batch_offsets(recs).items()]
            try:
                c.commit(offsets=offsets, asynchronous=False)
                emit("batch", recs=recs, commit_error=None)
            except KafkaException as e:
                emit("batch", recs=recs, commit_error=str(e))
    with contextlib.suppress(KafkaException, RuntimeError):
        c.close()
    emit("closed")


def subscriber_kwargs(
    bootstrap: str, group: str, session_ms: int, hb_ms: int, inst: str | None
) -> dict[str, Any]:
    """The KafkaConsumer / AIOKafkaConsumer settings of a group member (the same in both)."""
    return {
        "bootstrap_servers": bootstrap,
        "group_id": group,
        "group_instance_id": inst,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "session_timeout_ms": session_ms,
        "heartbeat_interval_ms": hb_ms,
        "max_poll_interval_ms": max(MAX_POLL_INTERVAL_MS, session_ms),
        "retry_backoff_ms": 50,
    }


def run_kafka_python(
    bootstrap: str, group: str, topic: str, session_ms: int, hb_ms: int, inst: str | None
) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer
    from kafka.errors import KafkaError
    from kafka.structs import OffsetAndMetadata, TopicPartition

    c = KafkaConsumer(**subscriber_kwargs(bootstrap, group, session_ms, hb_ms, inst), reconnect_backoff_ms=50)

    def gen_member() -> tuple[int, str]:
        md = c._coordinator.group_metadata()
        return md.generation_id, md.member_id

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: Any) -> None:
            emit("revoked", tps=sorted(tp.partition for tp in revoked))

        def on_partitions_assigned(self, assigned: Any) -> None:
            g, m = gen_member()
            emit("assigned", tps=sorted(tp.partition for tp in assigned), gen=g, member=m)

    c.subscribe([topic], listener=Listener())
    emit("ready")
    cmds = stdin_commands()
    while not close_requested(cmds):
        try:
            # A long poll: with 100 ms, a JoinGroup/SyncGroup round that outlives
            # one poll() sometimes never completes in kafka-python 3.0.12 (the
            # SyncGroup answer arrives, the listener is never called and
            # heartbeats never resume, so the session expires).
            polled = c.poll(timeout_ms=KAFKA_PYTHON_POLL_MS)
        except KafkaError as e:
            emit("error", fatal=True, error=f"{type(e).__name__}: {e}")
            time.sleep(POLL_S)
            continue
        recs = [[r.partition, r.offset, r.value.decode()] for rs in polled.values() for r in rs]
        if recs:
            offsets = {
                TopicPartition(topic, p): OffsetAndMetadata(o, "", -1) for p, o in batch_offsets(recs).items()
            }
            try:
                c.commit(offsets)
                emit("batch", recs=recs, commit_error=None)
            except KafkaError as e:
                emit("batch", recs=recs, commit_error=f"{type(e).__name__}: {e}")
    with contextlib.suppress(KafkaError):
        c.close()
    emit("closed")


def run_aiokafka(
    bootstrap: str, group: str, topic: str, session_ms: int, hb_ms: int, inst: str | None
) -> None:
    asyncio.run(_aiokafka_main(bootstrap, group, topic, session_ms, hb_ms, inst))


async def _aiokafka_main(
    bootstrap: str, group: str, topic: str, session_ms: int, hb_ms: int, inst: str | None
) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
    from aiokafka.errors import KafkaError
    from aiokafka.structs import OffsetAndMetadata, TopicPartition

    c = AIOKafkaConsumer(**subscriber_kwargs(bootstrap, group, session_ms, hb_ms, inst))

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        async def on_partitions_revoked(self, revoked: Any) -> None:
            emit("revoked", tps=sorted(tp.partition for tp in revoked))

        async def on_partitions_assigned(self, assigned: Any) -> None:
            co = c._coordinator
            emit(
                "assigned",
                tps=sorted(tp.partition for tp in assigned),
                gen=co.generation,
                member=co.member_id,
            )

    await c.start()
    c.subscribe([topic], listener=Listener())
    emit("ready")
    cmds = stdin_commands()
    while not close_requested(cmds):
        try:
            polled = await c.getmany(timeout_ms=int(POLL_S * 1000))
        except KafkaError as e:
            emit("error", fatal=True, error=f"{type(e).__name__}: {e}")
            await asyncio.sleep(POLL_S)
            continue
        recs = [[r.partition, r.offset, r.value.decode()] for rs in polled.values() for r in rs]
        if recs:
            offsets = {
                TopicPartition(topic, p): OffsetAndMetadata(o, "") for p, o in batch_offsets(recs).items()
            }
            try:
                await c.commit(offsets)
                emit("batch", recs=recs, commit_error=None)
            except KafkaError as e:
                emit("batch", recs=recs, commit_error=f"{type(e).__name__}: {e}")
    with contextlib.suppress(KafkaError):
        await c.stop()
    emit("closed")


def run_confluent_consumer_protocol(
    bootstrap: str, group: str, topic: str, session_ms: int, hb_ms: int, inst: str | None
) -> None:
    run_confluent(bootstrap, group, topic, session_ms, hb_ms, inst, protocol="consumer")


def run_confluent_cooperative(
    bootstrap: str, group: str, topic: str, session_ms: int, hb_ms: int, inst: str | None
) -> None:
    run_confluent(bootstrap, group, topic, session_ms, hb_ms, inst, strategy="cooperative-sticky")


RUNNERS: dict[str, Callable[..., None]] = {
    "confluent": run_confluent,
    "confluent-consumer": run_confluent_consumer_protocol,
    "confluent-cooperative": run_confluent_cooperative,
    "kafka-python": run_kafka_python,
    "aiokafka": run_aiokafka,
}


def main(argv: list[str]) -> None:
    if os.environ.get("GROUP_MEMBER_DEBUG"):  # client debug logs on stderr, for chasing a failure
        import logging

        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    lib, bootstrap, group, topic, session_ms, hb_ms = argv[:6]
    inst = argv[6] if len(argv) > 6 else None
    RUNNERS[lib](bootstrap, group, topic, int(session_ms), int(hb_ms), inst)


# -- the test side: a handle on one member process ---------------------------------------------


def member_command(lib: str, java_classes: Path | None) -> list[str]:
    """"java": GroupMember with the 3.9 client; "java-consumer": with the 4.3 client and KIP-848's
    group protocol, "java-classic" with the 4.3 client and the classic protocol (compile it with
    `compile_group_member("4.3")`)."""
    if lib in ("java", "java-consumer", "java-classic"):
        from tests.integration.harness import JAVA_CLIENTS

        assert java_classes is not None, "compile java/GroupMember.java first (the java_classes fixture)"
        consumer = lib == "java-consumer"
        jars = JAVA_CLIENTS["3.9" if lib == "java" else "4.3"]
        return [
            "java",
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            *(["-Dgroup.protocol=consumer"] if consumer else []),
            "-cp",
            f"{java_classes}{os.pathsep}{jars}/*",
            "GroupMember",
        ]
    return [sys.executable, "-m", "tests.integration.test_groups_member", lib]


class Member:
    """A member process and everything it reported so far (updated by a reader thread)."""

    def __init__(
        self,
        lib: str,
        bootstrap: str,
        group: str,
        topic: str,
        *,
        session_ms: int,
        heartbeat_ms: int,
        instance_id: str | None = None,
        java_classes: Path | None = None,
        name: str = "",
    ) -> None:
        self.lib = lib
        self.name = name or instance_id or lib
        args = [bootstrap, group, topic, str(session_ms), str(heartbeat_ms)] + (
            [instance_id] if instance_id else []
        )
        self.proc = subprocess.Popen(
            [*member_command(lib, java_classes), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.lock = threading.Lock()
        self.events: list[dict[str, Any]] = []
        self.stderr: list[str] = []
        self.assigned: list[int] = []  # current assignment ([] between revoke and assign)
        self.records: list[tuple[int, int, str, bool]] = []  # (partition, offset, value, committed)
        self.ended = threading.Event()
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("@@ "):
                self._on_event(json.loads(line[3:]))
        self.ended.set()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self.lock:
                self.stderr.append(line)

    def _on_event(self, e: dict[str, Any]) -> None:
        with self.lock:
            self.events.append(e)
            if e["ev"] == "assigned":
                self.assigned = list(e["tps"])
            elif e["ev"] == "revoked":
                self.assigned = [p for p in self.assigned if p not in e["tps"]]
            elif e["ev"] == "batch":
                ok = e["commit_error"] is None
                self.records.extend((p, o, v, ok) for p, o, v in e["recs"])

    # -- views ------------------------------------------------------------------------

    def of(self, ev: str) -> list[dict[str, Any]]:
        with self.lock:
            return [e for e in self.events if e["ev"] == ev]

    def current(self) -> list[int]:
        with self.lock:
            return list(self.assigned)

    def got(self) -> list[tuple[int, int, str, bool]]:
        with self.lock:
            return list(self.records)

    def values(self) -> list[str]:
        return [v for _p, _o, v, _ok in self.got()]

    def errors(self) -> list[dict[str, Any]]:
        return self.of("error")

    def last_assignment(self) -> dict[str, Any] | None:
        a = self.of("assigned")
        return a[-1] if a else None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def describe(self) -> str:
        with self.lock:
            evs = [
                e
                if e["ev"] != "batch"
                else {"ev": "batch", "n": len(e["recs"]), "commit_error": e["commit_error"]}
                for e in self.events
            ]
            err = "".join(self.stderr[-30:])
        return f"--- member {self.name} ({self.lib}) events: {evs[-40:]}\n--- stderr tail:\n{err}"

    # -- actions ----------------------------------------------------------------------

    def request_close(self) -> None:
        if self.alive():
            assert self.proc.stdin is not None
            with contextlib.suppress(BrokenPipeError, OSError):
                self.proc.stdin.write("close\n")
                self.proc.stdin.flush()

    def close(self, timeout: float = 30) -> None:
        """Close the consumer (dynamic members send LeaveGroup) and wait for the process to exit."""
        if self.alive():
            self.request_close()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(
                    f"member {self.name} did not close within {timeout}s\n{self.describe()}"
                ) from None
        self.ended.wait(5)
        assert self.of("closed"), f"member {self.name} exited without closing\n{self.describe()}"

    def kill(self) -> None:
        """SIGKILL: the member dies without leaving the group or committing anything more."""
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.ended.wait(5)

    def stop_quietly(self) -> None:
        """Teardown: close if still running, kill if that does not work."""
        if self.alive():
            with contextlib.suppress(Exception):
                self.close(timeout=15)
        self.kill()
        for s in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            with contextlib.suppress(Exception):
                s.close()  # type: ignore[union-attr]


# -- the test side: topics, records, offsets, a set of members ----------------------------------


def compile_group_member(client: str = "3.9") -> Path:
    """java/GroupMember.java compiled once, so each member JVM starts without compiling."""
    from tests.integration.harness import JAVA_DIR, java_classes, require_java

    require_java(client)
    return java_classes(JAVA_DIR / "GroupMember.java", client)


def create_topic(bootstrap_port: int, topic: str, partitions: int) -> None:
    from tests.integration import wire

    with wire.WireClient(bootstrap_port) as c:
        wire.create_topic(c, topic, partitions)


def produce(bootstrap: str, topic: str, values: dict[int, list[str]]) -> None:
    """Produce `values[p]` to partition p, in order; wait until all are acknowledged."""
    from confluent_kafka import Producer

    failed: list[Any] = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    for part, vs in values.items():
        for v in vs:
            p.produce(
                topic,
                value=v.encode(),
                partition=part,
                on_delivery=lambda err, _m: err and failed.append(err),
            )
    assert p.flush(30) == 0, "records not delivered in 30s"
    assert not failed, failed


def phase_values(tag: str, counts: dict[int, int]) -> dict[int, list[str]]:
    return {p: [f"{tag}-p{p}-{i}" for i in range(n)] for p, n in counts.items()}


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets (OffsetFetch through librdkafka); -1 where none."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=15)
    finally:
        c.close()
    for tp in tps:
        assert tp.error is None, tp
    return {tp.partition: (tp.offset if tp.offset >= 0 else -1) for tp in tps}


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "end-offsets-probe"})
    try:
        return {
            p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=15)[1] for p in range(partitions)
        }
    finally:
        c.close()


def wait_for(pred: Callable[[], Any], timeout: float, what: str, members: list[Member]) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = pred()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout}s waiting for {what}\n" + "\n".join(m.describe() for m in members)
            )
        time.sleep(0.05)


def balanced(members: list[Member], partitions: int) -> dict[str, list[int]] | None:
    """The members' assignments if every member owns something, nobody shares a
    partition, together they own all `partitions`, and (where the client tells)
    all are in the same generation; else None."""
    for m in members:
        if not m.alive():
            raise AssertionError(f"member {m.name} exited\n{m.describe()}")
    current = {m.name: m.current() for m in members}
    owned = sorted(p for ps in current.values() for p in ps)
    if any(not ps for ps in current.values()) or owned != list(range(partitions)):
        return None
    gens = {(m.last_assignment() or {}).get("gen") for m in members}
    if None not in gens and len(gens) > 1:
        return None
    return current


def wait_balanced(members: list[Member], partitions: int, timeout: float = 30) -> dict[str, list[int]]:
    return dict(
        wait_for(
            lambda: balanced(members, partitions),
            timeout,
            f"{partitions} partitions split over {[m.name for m in members]}",
            members,
        )
    )


def wait_consumed(members: list[Member], values: set[str], timeout: float = 30) -> None:
    def done() -> bool:
        got = {v for m in members for v in m.values()}
        return values <= got

    wait_for(done, timeout, f"{len(values)} records consumed", members)


def deliveries(members: list[Member]) -> dict[str, list[tuple[str, int, int, bool]]]:
    """value -> every delivery of it: (member, partition, offset, committed)."""
    out: dict[str, list[tuple[str, int, int, bool]]] = {}
    for m in members:
        for p, o, v, ok in m.got():
            out.setdefault(v, []).append((m.name, p, o, ok))
    return out


class Members:
    """Starts members for one test and stops every one of them at teardown."""

    def __init__(self, bootstrap: str, java_classes: Path | None) -> None:
        self.bootstrap = bootstrap
        self.java_classes = java_classes
        self.started: list[Member] = []

    def start(
        self,
        lib: str,
        group: str,
        topic: str,
        names: list[str],
        *,
        session_ms: int,
        heartbeat_ms: int,
        static: bool = False,
    ) -> list[Member]:
        new = [
            Member(
                lib,
                self.bootstrap,
                group,
                topic,
                session_ms=session_ms,
                heartbeat_ms=heartbeat_ms,
                instance_id=name if static else None,
                java_classes=self.java_classes,
                name=name,
            )
            for name in names
        ]
        self.started.extend(new)
        return new

    def close(self) -> None:
        for m in self.started:
            m.request_close()
        for m in self.started:
            m.stop_quietly()


def close_all(members: list[Member]) -> None:
    """Close members concurrently (each close can take a poll interval or a LeaveGroup round trip)."""
    for m in members:
        m.request_close()
    for m in members:
        m.close()


if __name__ == "__main__":
    main(sys.argv[1:])
