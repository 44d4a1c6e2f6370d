"""Capture golden request frames from real Kafka clients (the codecs are tested against
frames real clients sent, checked both ways, besides round trips and fuzzing).

    .venv/bin/python -m tests.integration.golden.capture [--clients confluent,aiokafka,java]

Starts a Gregor broker, puts a recording TCP proxy in front of it (the broker
advertises the proxy's address, so every connection goes through it), and
drives each client through CreateTopics, Produce, Metadata, ListOffsets and
Fetch (ApiVersions comes first on every connection). For each client and each
API Gregor serves, the first request frame seen at each version is written to

    tests/integration/golden/<client>/<api_key>-<ApiName>-v<version>.bin

as the frame payload (request header + body, without the 4-byte size prefix),
and MANIFEST.json records client versions and what was captured. The unit test
tests/unit/test_golden_frames.py decodes each with Gregor's header + codec path
and re-encodes it to identical bytes.

Frames are whatever the clients send, including timestamps and random ids, so
re-running rewrites the files; commit them when the clients change.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tests.integration.harness import JAVA_DEPS, JAVA_DIR, BrokerFactory, free_port

GOLDEN_DIR = Path(__file__).resolve().parent
SERVED = {0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 18: "ApiVersions", 19: "CreateTopics"}


class RecordingProxy:
    """Forwards 127.0.0.1:port → upstream and records client→broker frames."""

    def __init__(self, port: int, upstream: int) -> None:
        self.port = port
        self.upstream = upstream
        self.label = "unlabelled"
        self.frames: list[tuple[str, bytes]] = []
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", port))
        self._closing = False
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._closing = True
        self._server.close()

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                broker = socket.create_connection(("127.0.0.1", self.upstream))
            except OSError:
                client.close()
                continue
            label = self.label
            threading.Thread(target=self._pump_requests, args=(client, broker, label), daemon=True).start()
            threading.Thread(target=self._pump, args=(broker, client), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _pump_requests(self, src: socket.socket, dst: socket.socket, label: str) -> None:
        buf = bytearray()
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
                buf += chunk
                while len(buf) >= 4:
                    (size,) = struct.unpack_from(">i", buf, 0)
                    if size < 0 or len(buf) < 4 + size:
                        break
                    with self._lock:
                        self.frames.append((label, bytes(buf[4 : 4 + size])))
                    del buf[: 4 + size]
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


# -- client drivers -------------------------------------------------------------------


def drive_confluent(bootstrap: str, topic: str) -> str:
    import confluent_kafka
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    producer.produce(topic, key=b"golden-key", value=b"golden-value", headers=[("h", b"1")])
    assert producer.flush(15) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "golden-confluent",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    consumer.assign([TopicPartition(topic, 0, 0)])
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            break
    consumer.close()
    return f"confluent-kafka {confluent_kafka.version()} / librdkafka {confluent_kafka.libversion()[0]}"


def drive_aiokafka(bootstrap: str, topic: str) -> str:
    import aiokafka
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    async def run() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, 1, 1)])
        finally:
            await admin.close()
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"golden-value", key=b"golden-key", headers=[("h", b"1")])
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.end_offsets([tp])
            await consumer.seek_to_beginning(tp)
            await consumer.getmany(tp, timeout_ms=5000)
        finally:
            await consumer.stop()

    asyncio.run(run())
    return f"aiokafka {aiokafka.__version__}"


def _round_trip_java(bootstrap: str, topic: str, case: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["java", "-cp", f"{JAVA_DEPS}/*", str(JAVA_DIR / "RoundTrip.java"), bootstrap, "3",
         str(int(time.time() * 1000) - 60_000), topic, case],
        capture_output=True, text=True, timeout=300,
    )


def drive_java(bootstrap: str, topic: str) -> str:
    """RoundTrip.java twice: with an auto-created topic (Produce, Fetch, ListOffsets,
    Metadata), then with the Admin client's CreateTopics. The second run's
    failure is reported but does not stop the capture: the request is what we
    want, and it was sent."""
    if shutil.which("java") is None or not (JAVA_DEPS / "kafka-clients.jar").exists():
        raise RuntimeError("java or .deps/java/kafka-clients.jar missing (make java-deps)")
    notes = []
    for case in ("none:1:auto", "none:1"):
        proc = _round_trip_java(bootstrap, f"{topic}-{case.replace(':', '-')}", case)
        if proc.returncode != 0:
            lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "Exception" in ln]
            notes.append(f"RoundTrip.java {case} failed: {lines[:1]}")
            print(notes[-1])
    jar = next(JAVA_DEPS.glob("kafka-clients*.jar"))
    return f"kafka-clients ({jar.name}, via tests/integration/java/RoundTrip.java)" + (
        f"; {'; '.join(notes)}" if notes else ""
    )


DRIVERS: dict[str, Callable[[str, str], str]] = {
    "confluent": drive_confluent,
    "aiokafka": drive_aiokafka,
    "java": drive_java,
}


# -- main -------------------------------------------------------------------------------


def save(frames: list[tuple[str, bytes]], client: str) -> list[dict[str, object]]:
    out_dir = GOLDEN_DIR / client
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    seen: set[tuple[int, int]] = set()
    saved = []
    for label, payload in frames:
        if label != client or len(payload) < 8:
            continue
        api_key, version = struct.unpack_from(">hh", payload, 0)
        if api_key not in SERVED or (api_key, version) in seen:
            continue
        seen.add((api_key, version))
        name = f"{api_key:02d}-{SERVED[api_key]}-v{version}.bin"
        (out_dir / name).write_bytes(payload)
        saved.append({"file": f"{client}/{name}", "api_key": api_key, "api_version": version,
                      "size": len(payload)})
    return saved


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", default=",".join(DRIVERS))
    args = parser.parse_args()
    clients = [c for c in args.clients.split(",") if c]
    proxy_port = free_port()
    factory = BrokerFactory(Path(tempfile.mkdtemp(prefix="golden-")))
    manifest_path = GOLDEN_DIR / "MANIFEST.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    try:
        broker = factory(overrides={"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy_port}"})
        proxy = RecordingProxy(proxy_port, broker.port)
        for client in clients:
            proxy.label = client
            topic = f"golden-{client}-{int(time.time())}"
            version = DRIVERS[client](f"127.0.0.1:{proxy_port}", topic)
            time.sleep(0.5)
            saved = save(proxy.frames, client)
            missing = sorted(set(SERVED.values()) - {str(s["file"]).split("-")[1] for s in saved})
            manifest[client] = {"client": version, "frames": saved, "missing": missing}
            print(f"{client}: {version}: {len(saved)} frames; missing {missing or 'none'}")
        proxy.close()
    finally:
        factory.close()
    manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
