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
