"""Fuzzing every served API against a real broker (issue "Requests that decode but
make no sense").

Frames come from two sources, from one seeded RNG (GREGOR_FUZZ_SEED):

- mutations of the real client frames captured in tests/integration/golden/
  (bits flipped, bytes set to length-like values, cuts, inserts);
- schema-aware random requests of every API and version the broker advertises,
  walked from the codec's schema: nulls (also where the schema forbids them),
  negative and huge lengths, counts and ids, real and broken record batches,
  then, for half of them, mutated the same way.

A second test sends such frames to a SASL_PLAINTEXT listener before authentication
(after zero to two SASL frames, well-formed or not): none but ApiVersions and the
SASL requests may be answered; every other frame closes the connection.

Each frame goes on its own connection, followed by an ApiVersions probe. For
every frame the broker must answer (the probe's answer proves the connection
is still in order; acks=0 produce has no answer of its own) or close the
connection cleanly; only APIs that legitimately park (long-poll fetch, group
joins) may keep it waiting. After every frame: no traceback in the broker log,
and a closed connection (a rejected request) stored no byte in any log. A
canary topic's data, acknowledged before the fuzzing and never named by it,
stays byte for byte what it was, also after a kill -9 and restart at the end.

GREGOR_FUZZ_FRAMES sets the number of frames (default 3,000: about 15 s on an idle
machine; set it higher for a longer run).
"""

from __future__ import annotations

import os
import random
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from protocol.messages import REQUESTS, RESPONSES, RequestDecodeError, decode_request
from tests.integration.harness import BrokerFactory, BrokerProcess, free_port, started_broker, wait_until
from tests.integration.wire import (
    PeerClosed,
    WireClient,
    build_batch,
    create_topic,
    encode_body,
    fix_crc,
    frame,
    partition_errors,
    request_header,
)

SEED = int(os.environ.get("GREGOR_FUZZ_SEED", "20261122"))
FRAMES = int(os.environ.get("GREGOR_FUZZ_FRAMES", "3000"))
GOLDEN = Path(__file__).parent / "golden"
CANARY = "zz-canary-b4f1"  # never produced by the fuzzer (frames naming it are skipped)
TOPICS = ["fz-a", "fz-b", "fz-new", "", "a/b", "t" * 250]
GROUPS = ["fz-g", "", "g" * 300]
INT_LIMITS = {"int8": 8, "int16": 16, "uint16": 16, "int32": 32, "int64": 64}
PARKING = {1, 11, 14}  # Fetch long-poll, JoinGroup, SyncGroup may legitimately wait
WAIT_S = 3.0
PARK_S = 0.3
MAX_PARTITIONS = 16  # huge partition counts belong to the topic-creation fix, not here
BROKER_RESOURCES = {4, 8}  # broker and broker-logger configs could end the canary's retention


# -- random values from the schema ----------------------------------------------------


class Gen:
    def __init__(self, rng: random.Random, producer_ids: list[int]) -> None:
        self.rng = rng
        self.producer_ids = producer_ids  # real ones, so transactional paths are reached

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def message(self, api_key: int, version: int) -> bytes:
        cls = REQUESTS[api_key]
        fields = self.fields(cls._struct, version, depth=0)
        return bytes(cls(version=version, **fields).encode(version=version))

    def fields(self, struct_field: Any, version: int, depth: int) -> dict[str, Any]:
        return {
            f.name: self.value(f, version, depth)
            for f in struct_field.fields.values()
            if f.for_version_q(version)
        }

    def value(self, field: Any, version: int, depth: int) -> Any:
        nullable = field.nullable_for_version_q(version)
        has_null = field.is_array() or field.type_str in ("string", "bytes", "records") or (
            field.is_struct() and (nullable or field.tag is not None)
        )
        if has_null and self.chance(0.15 if nullable else 0.02):
            return None  # null, also where the schema forbids it
        if field.is_struct_array() or field.is_array():
            count = 0 if depth > 2 else self.rng.choice([0, 1, 1, 1, 2, 3])
            inner = field.array_of
            if inner.is_struct():
                return [inner.data_class(version=version, **self.fields(inner, version, depth + 1))
                        for _ in range(count)]
            return [self.simple(inner, inner.type_str) for _ in range(count)]
        if field.is_struct():
            return field.data_class(version=version, **self.fields(field, version, depth + 1))
        return self.simple(field, field.type_str)

    def simple(self, field: Any, type_str: str) -> Any:
        name = field.name
        if type_str in INT_LIMITS:
            return self.integer(name, INT_LIMITS[type_str], type_str == "uint16")
        if type_str == "bool":
            return self.chance(0.5)
        if type_str == "float64":
            return self.rng.choice([0.0, -1.0, 1e300, 0.5])
        if type_str == "uuid":
            return None if self.chance(0.5) else uuid.UUID(int=self.rng.getrandbits(128))
        if type_str == "string":
            return self.string(name)
        if type_str == "records":
            return self.records()
        return self.rng.randbytes(self.rng.choice([0, 1, 8, 40]))

    def integer(self, name: str, bits: int, unsigned: bool) -> int:
        low, high = (0, 2**bits - 1) if unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
        if name == "producer_id" and self.chance(0.6):
            return self.rng.choice(self.producer_ids)
        if "partition" in name or "index" in name or name in ("count", "replication_factor"):
            pool = [0, 1, 2, -1, 3, 99, low, high] if "count" not in name else [1, 2, 3, 0, -1, 16]
            return max(low, min(high, self.rng.choice(pool)))
        pool = [0, 1, -1, -2, 2, 5, 1000, low, high, self.rng.randint(low, high)]
        return max(low, min(high, self.rng.choice(pool)))

    def string(self, name: str) -> str:
        if "group" in name or "member" in name:
            return self.rng.choice(GROUPS)
        if "transactional" in name:
            return self.rng.choice(["fz-t", "fz-t2", ""])
        if "name" in name or "topic" in name:
            return self.rng.choice(TOPICS)
        return self.rng.choice(["", "x", "fz", "cleanup.policy", "retention.ms", "-1", "\u00e9" * 3])

    def records(self) -> bytes:
        pid = self.rng.choice([-1, -1, -2, 0, 1, 7, -(2**63), 2**63 - 1])
        batch = build_batch(
            [self.rng.randbytes(self.rng.choice([0, 3, 50]))] * self.rng.choice([1, 2, 5]),
            producer_id=pid, producer_epoch=self.rng.choice([-1, 0, 1, 32767]),
            base_sequence=self.rng.choice([-1, 0, 1, 2**31 - 1]), transactional=self.chance(0.3),
            compression=self.rng.choice([0, 0, 1, 2]),
        )
        if self.chance(0.3):
            batch = mutate(self.rng, batch, start=8)
            if self.chance(0.5) and len(batch) > 21:
                batch = fix_crc(batch)  # a valid CRC over nonsense
        return batch


def mutate(rng: random.Random, data: bytes, start: int = 0) -> bytes:
    """A few bit flips, length-like overwrites, cuts and inserts at or after ``start``."""
    out = bytearray(data)
    for _ in range(rng.choice([1, 1, 2, 3, 5])):
        if len(out) <= start:
            break
        pos = rng.randrange(start, len(out))
        op = rng.choice(["flip", "set", "set", "cut", "insert", "dup"])
        if op == "flip":
            out[pos] ^= 1 << rng.randrange(8)
        elif op == "set":
            value = rng.choice([b"\xff", b"\xff\xff", b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff",
                                b"\xff\xfe", b"\x80\x00\x00\x00", b"\x00", b"\x80"])
            out[pos:pos + len(value)] = value
        elif op == "cut":
            del out[pos:]
        elif op == "insert":
            out[pos:pos] = rng.choice([b"\x00", b"\xff\xff\xff\xff", rng.randbytes(3)])
        else:
            end = min(len(out), pos + rng.randrange(1, 16))
            out[pos:pos] = out[pos:end]
    return bytes(out)


# -- the broker and its logs ------------------------------------------------------------


def log_sizes(data_dir: Path) -> dict[str, int]:
    sizes = {}
    for part in os.scandir(data_dir):
        if part.is_dir():
            for f in os.scandir(part.path):
                if f.name.endswith(".log"):
                    sizes[f"{part.name}/{f.name}"] = f.stat().st_size
    return sizes


def data_stored(data_dir: Path, before: dict[str, int], after: dict[str, int]) -> list[str]:
    """Log files of user topics that gained a data batch. Internal topics and control
    batches are left out: the coordinators write those in the background (a transaction
    that times out is aborted with markers in its partitions)."""
    found = []
    for name, size in after.items():
        old = before.get(name, 0)
        if size == old or name.startswith("__"):
            continue
        with open(data_dir / name, "rb") as f:
            f.seek(old)
            new = f.read(size - old)
        pos = 0
        while pos + 61 <= len(new):
            (length,) = struct.unpack_from(">i", new, pos + 8)
            if not new[pos + 22] & 0x20:  # attributes (i16 at 21): bit 5 = control batch
                found.append(f"{name} at byte {old + pos}")
                break
            pos += 12 + length
    return found


def canary_bytes(broker: BrokerProcess) -> dict[str, bytes]:
    out = {}
    for part in (0, 1):
        for f in sorted(broker.partition_dir(CANARY, part).glob("*.log")):
            out[f"{part}/{f.name}"] = f.read_bytes()
    return out


def served(c: WireClient) -> list[tuple[int, int]]:
    resp = c.api_versions(version=3)
    return [(k.api_key, v) for k in resp.api_keys if k.api_key in REQUESTS
            for v in range(k.min_version, k.max_version + 1)]


def unsafe(api_key: int, version: int, body: bytes) -> bool:
    """Frames whose legitimate effect would destroy the canary or exhaust the machine
    (topic creation's own limits are another item of the issue): skipped."""
    if CANARY.encode() in body:
        return True
    try:
        request = decode_request(api_key, version, memoryview(body))
    except RequestDecodeError:
        return False
    if api_key == 19:  # CreateTopics
        return any(t.num_partitions > MAX_PARTITIONS or len(t.assignments) > MAX_PARTITIONS
                   for t in request.topics)
    if api_key == 37:  # CreatePartitions
        return any(t.count > MAX_PARTITIONS for t in request.topics)
    if api_key in (33, 44):  # AlterConfigs, IncrementalAlterConfigs
        return any(r.resource_type in BROKER_RESOURCES for r in request.resources)
    return False


def acks0_produce(api_key: int, version: int, body: bytes) -> bool:
    """An acks=0 produce closes the connection when any partition fails, after appending
    to the partitions that did not (Kafka's rule): a close does not mean "nothing stored"."""
    if api_key != 0:
        return False
    try:
        return bool(decode_request(api_key, version, memoryview(body)).acks == 0)
    except RequestDecodeError:
        return False


class Outcome:
    ANSWERED, CLOSED, PARKED = "answered", "closed", "parked"


def exchange(port: int, api_key: int, version: int, body: bytes) -> str:
    """Send one frame plus an ApiVersions v0 probe; how the broker dealt with it."""
    payload = request_header(api_key, version, 7) + body
    probe = request_header(18, 0, 8)
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as s:
        c = WireClient.__new__(WireClient)
        c.sock = s
        s.sendall(frame(payload) + frame(probe))
        s.settimeout(PARK_S if api_key in PARKING else WAIT_S)
        try:
            first = c.recv_frame()
            cid = struct.unpack_from(">i", first)[0]
            if cid == 7:
                decode_response(api_key, version, first)
                first = c.recv_frame()
            assert struct.unpack_from(">i", first) == (8,), f"answers out of order: {first[:8].hex()}"
            return Outcome.ANSWERED
        except PeerClosed:
            return Outcome.CLOSED
        except TimeoutError:
            assert api_key in PARKING, f"no answer and no close within {WAIT_S}s"
            return Outcome.PARKED


def decode_response(api_key: int, version: int, payload: bytes) -> Any:
    pos = 4
    if api_key != 18 and RESPONSES[api_key].flexible_version_q(version):
        pos += 1
    if api_key == 18 and payload[4:6] != b"\x00\x00":
        return None  # an ApiVersions error answer: checked by test_bad_input
    return RESPONSES[api_key].decode(payload[pos:], version=version)


@pytest.fixture(scope="module")
def fuzz_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = {"group.initial.rebalance.delay.ms": 0, "transaction.max.timeout.ms": 60000}
    with started_broker(tmp_path_factory.mktemp("fuzz"), overrides) as b:
        yield b


def acknowledge_canary(c: WireClient) -> None:
    create_topic(c, CANARY, partitions=2)
    for i in range(6):
        batch = build_batch([f"canary-{i}-{j}".encode() * 20 for j in range(i + 1)])
        resp = c.produce(CANARY, [(i % 2, batch)], acks=-1)
        assert partition_errors(resp) == {i % 2: 0}, resp


def init_producer_id(c: WireClient, transactional_id: str | None) -> int:
    """A real producer id (after FindCoordinator, which creates __transaction_state)."""
    if transactional_id is not None:
        c.call(REQUESTS[10](key=transactional_id, key_type=1), 1)
    msg = REQUESTS[22](transactional_id=transactional_id, transaction_timeout_ms=60000)
    resp = wait_until(lambda: (r := c.call(msg, 1)).error_code == 0 and r, msg="InitProducerId")
    return int(resp.producer_id)


def test_fuzz_every_served_api(fuzz_broker: BrokerProcess) -> None:
    rng = random.Random(SEED)
    golden = [p.read_bytes() for p in sorted(GOLDEN.glob("*/*.bin"))]
    with WireClient(fuzz_broker.port) as c:
        acknowledge_canary(c)
        create_topic(c, "fz-a", partitions=2)
        create_topic(c, "fz-b")
        apis = served(c)
        gen = Gen(rng, [init_producer_id(c, tid) for tid in (None, "fz-t", "fz-t2")])
    canary = canary_bytes(fuzz_broker)
    sizes = log_sizes(fuzz_broker.data_dir)
    log_pos = len(fuzz_broker.log_text())
    counts = {Outcome.ANSWERED: 0, Outcome.CLOSED: 0, Outcome.PARKED: 0, "skipped": 0}
    started = time.monotonic()
    for n in range(FRAMES):
        api_key, version, body = next_frame(rng, gen, apis, golden)
        if unsafe(api_key, version, body):
            counts["skipped"] += 1
            continue
        what = f"frame {n} (seed {SEED}): api {api_key} v{version} body {body[:200].hex()}"
        try:
            outcome = exchange(fuzz_broker.port, api_key, version, body)
        except AssertionError as exc:
            raise AssertionError(f"{what}: {exc}\n{fuzz_broker.log_tail(40)}") from None
        counts[outcome] += 1
        text = fuzz_broker.log_text()
        assert "Traceback" not in text[log_pos:], f"{what}\n{text[log_pos:][-4000:]}"
        log_pos = len(text)
        now = log_sizes(fuzz_broker.data_dir)
        if outcome == Outcome.CLOSED and not acks0_produce(api_key, version, body):
            stored = data_stored(fuzz_broker.data_dir, sizes, now)
            assert not stored, f"{what}: a rejected request stored data batches in {stored}"
        sizes = now
        assert fuzz_broker.running, f"{what}: the broker exited\n{fuzz_broker.log_tail(60)}"
    elapsed = time.monotonic() - started
    print(f"fuzz: {FRAMES} frames in {elapsed:.1f}s: {counts}")
    assert counts[Outcome.ANSWERED] > FRAMES // 10 and counts[Outcome.CLOSED] > FRAMES // 10, counts
    assert canary_bytes(fuzz_broker) == canary
    fuzz_broker.kill9()
    fuzz_broker.start()
    assert canary_bytes(fuzz_broker) == canary, "acknowledged canary data changed across kill -9"
    with WireClient(fuzz_broker.port) as c:
        assert [c.log_end_offset(CANARY, p) for p in (0, 1)] == [1 + 3 + 5, 2 + 4 + 6]
    assert "Traceback" not in fuzz_broker.log_text()


def next_frame(
    rng: random.Random, gen: Gen, apis: list[tuple[int, int]], golden: list[bytes]
) -> tuple[int, int, bytes]:
    """(api key, version, body) of the next frame to send."""
    if rng.random() < 0.3:
        captured = rng.choice(golden)
        api_key, version = struct.unpack_from(">hh", captured)
        (client_len,) = struct.unpack_from(">h", captured, 8)
        start = 10 + max(client_len, 0) + (1 if REQUESTS[api_key].flexible_version_q(version) else 0)
        return api_key, version, mutate(rng, captured[start:])
    api_key, version = rng.choice(apis)
    body = gen.message(api_key, version)
    if rng.random() < 0.5:
        body = mutate(rng, body)
    return api_key, version, body


# -- before authentication -------------------------------------------------------------

PRE_AUTH_APIS = {17, 18, 36}  # SaslHandshake, ApiVersions, SaslAuthenticate
PRE_AUTH_FRAMES = int(os.environ.get("GREGOR_FUZZ_PRE_AUTH_FRAMES", "1000"))
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_alice="alice-secret";')


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, int]]:
    sasl_port, plain_port = free_port(), free_port()
    overrides = {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain_port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "connection.failed.authentication.delay.ms": 0,  # most exchanges fail: no waiting on them
    }
    factory = BrokerFactory(tmp_path_factory.mktemp("fuzz-sasl"))
    try:
        yield factory(overrides, port=plain_port), sasl_port
    finally:
        factory.close()


def sasl_prelude(rng: random.Random, gen: Gen) -> bytes:
    """Zero to two frames of the SASL exchange, well-formed or not, with correlation ids 1-2:
    they may leave the connection before, in the middle of or after a failed handshake. After a
    SaslHandshake v0 the frames that follow are read as bare SASL tokens."""
    frames = b""
    for cid in range(1, 1 + rng.randint(0, 2)):
        if rng.random() < 0.5:
            version = rng.randint(0, 1)
            body = encode_body(REQUESTS[17](mechanism=rng.choice(["PLAIN", "SCRAM-SHA-512", "X"])), version)
            frames += frame(request_header(17, version, cid) + body)
        else:
            body = gen.message(36, rng.randint(0, 2))
            frames += frame(request_header(36, rng.randint(0, 2), cid) + mutate(rng, body))
    return frames


def pre_auth_exchange(port: int, prelude: bytes, api_key: int, version: int, body: bytes) -> str:
    """The prelude, one frame (correlation id 7), an ApiVersions probe: whether the frame
    was served. A frame of an API other than ApiVersions/SASL must never be answered."""
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as s:
        c = WireClient.__new__(WireClient)
        c.sock = s
        try:
            s.sendall(prelude + frame(request_header(api_key, version, 7) + body)
                      + frame(request_header(18, 0, 8)))
        except OSError:
            return Outcome.CLOSED  # closed while the frames were still being sent
        try:
            while True:
                (cid,) = struct.unpack_from(">i", c.recv_frame())
                assert cid != 7 or api_key in PRE_AUTH_APIS, f"api {api_key} served before auth"
                if cid == 8:
                    assert api_key in PRE_AUTH_APIS, f"connection kept after api {api_key}"
                    return Outcome.ANSWERED
        except (PeerClosed, ConnectionResetError):
            return Outcome.CLOSED


def test_fuzz_before_authentication_serves_only_sasl(sasl_broker: tuple[BrokerProcess, int]) -> None:
    broker, port = sasl_broker
    rng = random.Random(SEED + 1)
    golden = [p.read_bytes() for p in sorted(GOLDEN.glob("*/*.bin"))]
    with WireClient(broker.port) as c:
        create_topic(c, "fz-a", partitions=2)
        create_topic(c, "fz-b")
        apis = served(c)
        gen = Gen(rng, [init_producer_id(c, None)])
    sizes = log_sizes(broker.data_dir)
    counts = {Outcome.ANSWERED: 0, Outcome.CLOSED: 0}
    for n in range(PRE_AUTH_FRAMES):
        prelude = sasl_prelude(rng, gen)
        api_key, version, body = next_frame(rng, gen, apis, golden)
        what = f"frame {n} (seed {SEED + 1}): api {api_key} v{version} body {body[:200].hex()}"
        try:
            counts[pre_auth_exchange(port, prelude, api_key, version, body)] += 1
        except AssertionError as exc:
            raise AssertionError(f"{what}: {exc}\n{broker.log_tail(40)}") from None
        assert broker.running, f"{what}: the broker exited\n{broker.log_tail(60)}"
    print(f"fuzz before authentication: {PRE_AUTH_FRAMES} frames: {counts}")
    assert counts[Outcome.CLOSED] > PRE_AUTH_FRAMES // 2, counts
    assert not data_stored(broker.data_dir, sizes, log_sizes(broker.data_dir))
    assert "Traceback" not in broker.log_text()
    with WireClient(port) as c:  # the listener still serves a well-behaved client
        assert c.api_versions().error_code == 0
