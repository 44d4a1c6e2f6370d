"""The `gregor` command line: bad configuration stops start-up with a clear message."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.integration.harness import gregor_command


def _run(tmp_path: Path, text: str, *extra: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "broker.yaml"
    config.write_text(text)
    return subprocess.run([*gregor_command(), "broker", "--config", str(config), *extra],
                          capture_output=True, text=True, timeout=60)


def test_unknown_key_stops_start_up(tmp_path: Path) -> None:
    result = _run(tmp_path, f"log.dirs: {tmp_path}/data\nlog.segmnet.bytes: 100\n")
    assert result.returncode == 2
    assert "unknown configuration key 'log.segmnet.bytes'" in result.stderr


def test_bad_override_value_stops_start_up(tmp_path: Path) -> None:
    result = _run(tmp_path, f"log.dirs: {tmp_path}/data\n", "--override", "num.partitions=lots")
    assert result.returncode == 2
    assert "'num.partitions'" in result.stderr


def test_data_dir_of_another_node_stops_start_up(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "meta.properties").write_text("version=1\nnode.id=7\ncluster.id=abc\n")
    result = _run(tmp_path, f"log.dirs: {data}\nnode.id: 1\n")
    assert result.returncode == 2
    assert "another broker" in result.stderr and "7" in result.stderr
