"""Seed 003's online shop for exactly-once tests: topics, the processor subprocess
(tests/integration/eos_processor.py, or java/EosProcessor.java), and the checks.

`purchases` is turned into `invoices` and `shipments` by a read_committed consumer
in a group and a transactional producer that commits the consumed positions with
sendOffsetsToTransaction in the same transaction. In the end every purchase must
have exactly one invoice and one shipment in read_committed, and the group's
committed offsets (require_stable) must equal the end offsets of `purchases`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.clients import read_to_eof
from tests.integration.harness import REPO_ROOT, java_command, unique_topic, wait_until

PROCESSOR = Path(__file__).with_name("eos_processor.py")


class Shop:
    """Topics and group of one test run."""

    def __init__(
        self, bootstrap: str, purchases: int, partitions: tuple[int, int] = (3, 2), replication: int = 1,
        batch_size: int = 5000,
    ) -> None:
        self.bootstrap = bootstrap
        self.purchase_partitions, self.output_partitions = partitions
        self.purchases = unique_topic("purchases")
        self.invoices = unique_topic("invoices")
        self.shipments = unique_topic("shipments")
        self.group = unique_topic("shop")
        self.n = purchases
        admin = AdminClient({"bootstrap.servers": bootstrap})
        futures = admin.create_topics([
            NewTopic(self.purchases, self.purchase_partitions, replication),
            NewTopic(self.invoices, self.output_partitions, replication),
            NewTopic(self.shipments, self.output_partitions, replication),
        ], operation_timeout=20)
        for f in futures.values():
            f.result(timeout=30)
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                      "enable.idempotence": True})
        for i in range(purchases):
            p.produce(self.purchases, f"purchase-{i}".encode(), key=str(i).encode(),
                      partition=i % self.purchase_partitions)
            if i % batch_size == batch_size - 1:
                p.poll(0)
        assert p.flush(60) == 0

    def processor(
        self, txn_id: str, env: dict[str, str] | None = None, java: str | None = None, **opts: Any
    ) -> ProcessorRun:
        """eos_processor.py (or, java="3.9"/"4.3", java/EosProcessor.java with that client)."""
        args = {"batch": 10, "idle-exit": 1.0, "max-seconds": 90}
        args.update({k.replace("_", "-"): v for k, v in opts.items()})
        if java:
            command = java_command("EosProcessor.java", client=java)
        else:
            command = [sys.executable, str(PROCESSOR)]
        argv = [
            *command, "--bootstrap", self.bootstrap, "--group", self.group,
            "--txn-id", txn_id, "--purchases", self.purchases, "--invoices", self.invoices,
            "--shipments", self.shipments,
        ]
        for k, v in args.items():
            argv += [f"--{k}", str(v)]
        return ProcessorRun(argv, env or {})

    # -- checks ----------------------------------------------------------------------

    def read(self, topic: str, isolation: str) -> list[str]:
        tps = [(topic, p) for p in range(self.output_partitions)]
        msgs = read_to_eof(self.bootstrap, tps, isolation, "eos-check", 30, f"{isolation} {topic}")
        return [msg.value().decode() for _tp, msg in msgs]

    def end_offsets(self) -> dict[int, int]:
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "eos-watermarks"})
        try:
            return {
                p: c.get_watermark_offsets(TopicPartition(self.purchases, p), timeout=10)[1]
                for p in range(self.purchase_partitions)
            }
        finally:
            c.close()

    def committed(self) -> dict[int, int]:
        """The group's committed offsets, stable (OffsetFetch require_stable)."""
        c = Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": self.group,
            "isolation.level": "read_committed", "enable.auto.commit": False,
        })
        try:
            parts = [TopicPartition(self.purchases, p) for p in range(self.purchase_partitions)]
            tps = c.committed(parts, timeout=15)
            return {tp.partition: tp.offset for tp in tps}
        finally:
            c.close()

    def assert_exactly_once(self, expect_aborted: bool = True) -> None:
        for topic, word in ((self.invoices, "invoice"), (self.shipments, "shipment")):
            values = self.read(topic, "read_committed")
            counts = Counter(values)
            expected = {f"{word}-{i}" for i in range(self.n)}
            missing = sorted(expected - set(counts), key=lambda v: int(v.split("-")[1]))
            dups = {v: c for v, c in counts.items() if c > 1}
            strange = set(counts) - expected
            assert not missing and not dups and not strange, (
                f"{topic}: {len(values)} committed records for {self.n} purchases; "
                f"missing {missing[:20]} ({len(missing)}), duplicated {dict(list(dups.items())[:20])} "
                f"({len(dups)}), unexpected {sorted(strange)[:10]}"
            )
            if expect_aborted:
                raw = self.read(topic, "read_uncommitted")
                assert len(raw) > self.n, f"{topic}: no aborted output -- did any crash hit a transaction?"
        ends = self.end_offsets()
        assert sum(ends.values()) == self.n
        assert self.committed() == ends, "the group's committed offsets are not the end of purchases"



_RUNS: list[ProcessorRun] = []


def kill_processors() -> None:
    """No processor outlives its test (a failed test leaves them running otherwise)."""
    while _RUNS:
        _RUNS.pop().kill()


class ProcessorRun:
    """eos_processor.py as a subprocess; its JSON events collected by a reader thread."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        _RUNS.append(self)
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO_ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
        )
        self.events: list[dict[str, Any]] = []
        self.other: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with self.proc.stdout:
            for line in self.proc.stdout:
                try:
                    self.events.append(json.loads(line))
                except ValueError:
                    self.other.append(line.rstrip())

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in list(self.events) if e["event"] == kind]

    def wait_event(self, kind: str, count: int = 1, timeout: float = 30.0) -> dict[str, Any]:
        def seen() -> dict[str, Any] | None:
            found = self.of(kind)
            if len(found) >= count:
                return found[count - 1]
            assert self.proc.poll() is None or len(self.of(kind)) >= count, (
                f"processor exited {self.proc.returncode} before {count} x {kind}\n{self.transcript()}")
            return None
        return wait_until(seen, timeout=timeout, interval=0.02, msg=f"{count} x {kind}")

    def wait(self, timeout: float = 60.0) -> int:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"processor still running after {timeout}s\n{self.transcript()}") from None
        self._reader.join(5)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self._reader.join(5)

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def transcript(self, last: int = 40) -> str:
        other = int(os.environ.get("EOS_TRANSCRIPT_LINES", "20"))
        lines = [json.dumps(e) for e in self.events[-last:]] + self.other[-other:]
        return "--- processor output ---\n" + "\n".join(lines)
