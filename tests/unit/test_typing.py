"""The product code type-checks (mypy strict on protocol/, storage/, coordinator/, broker/),
with kafka-python's message classes typed by its own stubs: a handler that names a field its
request or response does not have fails here, not in front of a client."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import kafka

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["protocol", "storage", "coordinator", "broker", "gregor_spark", "gregor_console"]


def test_kafka_pythons_message_stubs_are_where_mypy_looks() -> None:
    stubs = Path(kafka.__file__).parent.with_name("kafka-stubs")
    assert (stubs / "py.typed").exists(), f"{stubs} missing: run `{sys.executable} scripts/kafka_stubs.py`"
    assert (stubs / "protocol" / "producer" / "produce.pyi").exists()


def test_mypy_strict_passes_on_the_product_code() -> None:
    done = subprocess.run([sys.executable, "-m", "mypy", *PACKAGES], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
