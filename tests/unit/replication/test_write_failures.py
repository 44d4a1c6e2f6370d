"""One log line per partition and change of state when a log cannot be written."""

from __future__ import annotations

import errno
import logging

import pytest

from broker.replication.write_failures import WriteFailures

FULL = OSError(errno.ENOSPC, "No space left on device")


def test_one_line_when_a_partition_fails_and_one_when_it_recovers(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "broker.replication.write_failures")
    failures = WriteFailures()
    assert failures.failed(("t", 0), FULL)
    assert not any(failures.failed(("t", 0), FULL) for _ in range(100))
    assert failures.failed(("t", 1), FULL) and failures.failing(("t", 0))
    for _ in range(10):
        failures.succeeded(("t", 0))
    assert not failures.failing(("t", 0)) and failures.failing(("t", 1))
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "partition t-0: cannot write its log (No space left on device): answering "
        "KAFKA_STORAGE_ERROR until a write succeeds",
        "partition t-1: cannot write its log (No space left on device): answering "
        "KAFKA_STORAGE_ERROR until a write succeeds",
        "partition t-0: its log is writable again (after: No space left on device)",
    ]
    assert [r.levelname for r in caplog.records] == ["ERROR", "ERROR", "INFO"]  # recovering is news
