"""The `gregor` command line: every user error stops start-up with one line that says
what is wrong, exit code non-zero, and never a traceback."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.harness import _api_versions_probe, free_port, gregor_command, wait_until
from tests.integration.wire import WireClient, metadata_request


def _gregor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*gregor_command(), *args], capture_output=True, text=True, timeout=60)


def _run(
    tmp_path: Path, text: str, *extra: str, name: str = "broker.yaml"
) -> subprocess.CompletedProcess[str]:
    config = tmp_path / name
    config.write_text(text)
    return _gregor("broker", "--config", str(config), *extra)


def _assert_refused(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode != 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def test_unknown_key_stops_start_up(tmp_path: Path) -> None:
    result = _run(tmp_path, f"log.dirs: {tmp_path}/data\nlog.segmnet.bytes: 100\n")
    assert result.returncode == 2
    _assert_refused(result, "unknown configuration key 'log.segmnet.bytes'")


def test_bad_override_value_stops_start_up(tmp_path: Path) -> None:
    result = _run(tmp_path, f"log.dirs: {tmp_path}/data\n", "--override", "num.partitions=lots")
    _assert_refused(result, "num.partitions must be an integer \u2265 1, got 'lots'")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("num.partitions: abc", "num.partitions must be an integer \u2265 1, got 'abc'"),
        ("num.partitions: -1", "num.partitions must be an integer \u2265 1, got -1"),
        ("listeners: [PLAINTEXT://127.0.0.1:1, PLAINTEXT://127.0.0.1:2]",
         "listeners must be listeners of the form NAME://host:port, e.g. PLAINTEXT://127.0.0.1:9092, got a "
         "YAML list ['PLAINTEXT://127.0.0.1:1', 'PLAINTEXT://127.0.0.1:2'] (listener PLAINTEXT named twice)"),
        ("listeners: 127.0.0.1:9092", "listeners must be listeners of the form NAME://host:port, "
         "e.g. PLAINTEXT://127.0.0.1:9092, got '127.0.0.1:9092' (no listener name: write "
         "PLAINTEXT://127.0.0.1:9092)"),
        ("metrics.listener: 127.0.0.1:9100",
         "metrics.listener must be empty (no endpoint) or http://host:port, got '127.0.0.1:9100' "
         "(no scheme: write http://127.0.0.1:9100)"),
        ("metadata.store: zookeeper://127.0.0.1:2181",
         "metadata.store must be local or etcd://host:port[,host:port...][/root], got 'zookeeper://"),
    ],
)
def test_bad_values_say_what_was_expected(tmp_path: Path, line: str, message: str) -> None:
    result = _run(tmp_path, f"log.dirs: {tmp_path}/data\n{line}\n")
    _assert_refused(result, f"gregor: configuration error: {message}")
    assert not (tmp_path / "data").exists()


def test_properties_file_is_refused_saying_yaml_is_expected(tmp_path: Path) -> None:
    text = f"node.id=1\nlog.dirs={tmp_path}/data\n"
    for name in ("server.properties", "broker.yaml"):
        result = _run(tmp_path, text, name=name)
        _assert_refused(result, "looks like a Java .properties file; Gregor reads YAML")


def test_missing_config_file(tmp_path: Path) -> None:
    result = _gregor("broker", "--config", str(tmp_path / "nope.yaml"))
    _assert_refused(result, f"cannot read config file {tmp_path / 'nope.yaml'}: No such file or directory")


def test_unknown_log_level(tmp_path: Path) -> None:
    result = _run(tmp_path, f"log.dirs: {tmp_path}/data\n", "--log-level", "LOUD")
    _assert_refused(result, "unknown log level 'LOUD'", "DEBUG, INFO, WARNING, ERROR, CRITICAL")


def test_busy_port_names_the_listener_before_touching_the_logs(tmp_path: Path, busy_port: int) -> None:
    listener = f"PLAINTEXT://127.0.0.1:{busy_port}"
    result = _run(tmp_path, f"log.dirs: {tmp_path}/data\nlisteners: {listener}\n")
    _assert_refused(result, f"cannot listen on {listener} (listeners): address already in use")
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == [".lock"]


def test_data_dir_of_another_node_stops_start_up(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "meta.properties").write_text("version=1\nnode.id=7\ncluster.id=abc\n")
    result = _run(tmp_path, f"log.dirs: {data}\nnode.id: 1\n")
    assert result.returncode == 2
    _assert_refused(result, "another broker", "node.id=7")


def test_version_and_config_docs() -> None:
    version = _gregor("--version")
    assert version.returncode == 0 and version.stdout.startswith("gregor "), version
    docs = _gregor("config-docs")
    assert docs.returncode == 0
    assert "| `num.partitions` | `1` | an integer \u2265 1 |" in docs.stdout


def test_debug_logs_each_connection_and_request(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "broker.yaml"
    config.write_text(f"log.dirs: {tmp_path}/data\nlisteners: PLAINTEXT://127.0.0.1:{port}\n"
                      "auto.create.topics.enable: false\n")
    log_path = tmp_path / "broker.log"
    with open(log_path, "w") as log_file:
        command = [*gregor_command(), "broker", "--config", str(config), "--log-level", "debug"]
        proc = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: _api_versions_probe(port, timeout=1.0), timeout=20, msg="broker start")
        with WireClient(port, client_id="debug-probe") as c:
            c.api_versions()
            c.call(metadata_request(["no-such-topic"], version=1), 1)
        wait_until(lambda: "closed after 2 requests" in log_path.read_text(), timeout=10, msg="close line")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    text = log_path.read_text()
    assert "Traceback" not in text, text
    peer = re.search(r"request from (127\.0\.0\.1:\d+) client 'debug-probe'", text)
    assert peer is not None, text
    lines = [x for x in text.splitlines() if peer.group(1) in x]
    assert len(lines) == 4, lines
    assert lines[0].endswith(f"connection from {peer.group(1)} opened"), lines[0]
    assert re.search(r"client 'debug-probe': ApiVersions v3 correlation 1, [0-9.]+ ms, NONE$", lines[1])
    assert re.search(r"client 'debug-probe': Metadata v1 correlation 2, [0-9.]+ ms, "
                     r"UNKNOWN_TOPIC_OR_PARTITION$", lines[2]), lines[2]
    assert lines[3].endswith(f"connection from {peer.group(1)} closed after 2 requests"), lines[3]
