"""One broker per data dir: a second broker on a locked `log.dirs` exits at once with a
message naming the dir and the holder, without touching a byte of it; the first keeps
serving; the lock dies with its holder (kill -9)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.integration.clients import read_to_eof
from tests.integration.harness import BrokerFactory, BrokerProcess, free_port, gregor_command, unique_topic

# No periodic writes by the first broker while the second one tries to start, so that
# "unchanged byte for byte" is about the failed start alone.
QUIET = {"log.flush.offset.checkpoint.interval.ms": 3_600_000, "log.retention.check.interval.ms": 3_600_000}


def _produce_acked(bootstrap: str, topic: str, n: int, tag: str) -> list[bytes]:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5})
    acked: list[bytes] = []

    def on_delivery(err: Any, msg: Any) -> None:
        assert err is None, err
        acked.append(msg.value())

    for i in range(n):
        p.produce(topic, f"{tag}-{i}".encode(), partition=0, on_delivery=on_delivery)
    assert p.flush(30) == 0
    assert len(acked) == n
    return acked


def _values(bootstrap: str, topic: str) -> list[bytes]:
    got = read_to_eof(bootstrap, [(topic, 0)], "read_uncommitted", "lock-it", 30, "dir lock")
    return [bytes(m.value()) for _tp, m in got]


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def _start_second(workdir: Path, config: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """A second `gregor broker` run to its end (it must exit by itself)."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "broker.yaml"
    path.write_text(yaml.safe_dump(config))
    return _run_config(path)


def _run_config(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*gregor_command(), "broker", "--config", str(path)],
                          capture_output=True, text=True, timeout=60)


def _assert_refused(result: subprocess.CompletedProcess[str], first: BrokerProcess) -> None:
    assert result.returncode != 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = [x for x in result.stderr.splitlines() if "gregor:" in x]
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert str(first.data_dir) in line, line
    assert first.proc is not None
    assert f"pid={first.proc.pid}" in line and "node.id=1" in line, line
    assert f"127.0.0.1:{first.port}" in line, line
    assert "recover" not in result.stderr, result.stderr


def test_second_broker_on_the_same_dir_exits_and_the_first_keeps_its_records(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    first = broker_factory(QUIET)
    topic = unique_topic("lock")
    acked = _produce_acked(first.bootstrap, topic, 100, "first")
    before = _snapshot(first.data_dir)

    second = {**first.config, "listeners": f"PLAINTEXT://127.0.0.1:{free_port()}", "node.id": 2}
    result = _start_second(tmp_path / "second", second)

    _assert_refused(result, first)
    assert _snapshot(first.data_dir) == before, "the failed start changed files in the data dir"
    assert first.running
    acked += _produce_acked(first.bootstrap, topic, 50, "after")
    first.restart()
    assert _values(first.bootstrap, topic) == acked


def test_accidental_second_make_run_fails_on_the_lock_not_the_port(broker_factory: BrokerFactory) -> None:
    """The same config again (same port, same dir): the lock refuses it before any
    recovery runs in the live dir and before the port is tried."""
    first = broker_factory(QUIET)
    topic = unique_topic("lock-twice")
    acked = _produce_acked(first.bootstrap, topic, 20, "first")
    before = _snapshot(first.data_dir)

    result = _run_config(first.config_path)

    _assert_refused(result, first)
    assert "address already in use" not in result.stderr.lower(), result.stderr
    assert _snapshot(first.data_dir) == before
    assert _values(first.bootstrap, topic) == acked


def test_lock_is_released_when_the_holder_is_killed(broker_factory: BrokerFactory) -> None:
    first = broker_factory()
    topic = unique_topic("lock-kill")
    acked = _produce_acked(first.bootstrap, topic, 10, "first")
    first.kill9()
    assert (first.data_dir / ".lock").exists()  # a stale file: the kernel dropped the flock

    successor = broker_factory({"log.dirs": str(first.data_dir)})

    assert _values(successor.bootstrap, topic) == acked
    assert f"listener=PLAINTEXT://127.0.0.1:{successor.port}" in (first.data_dir / ".lock").read_text()
