"""Golden request frames captured from real clients, checked both ways (the codecs are tested
against real clients' frames, besides round trips and fuzzing).

The frames under tests/integration/golden/<client>/ were recorded by
tests/integration/golden/capture.py (a TCP proxy in front of a Gregor broker)
from librdkafka (confluent-kafka), aiokafka and the Java client: one request
of each API Gregor serves. Each must:

- decode through Gregor's path: `peek_header`, `decode_request_header` with
  the flexibility the schema gives, then the kafka-python codec at that version;
- consume the body exactly (no bytes left over, none missing);
- re-encode to the identical bytes (header and body).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

with warnings.catch_warnings():  # kafka-python schema loading warns at import time
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.api_header import RequestHeader as KpRequestHeader

    from protocol.headers import decode_request_header, header_is_flexible, peek_header
    from protocol.messages import REQUESTS

GOLDEN = Path(__file__).resolve().parents[1] / "integration" / "golden"
CLIENTS = ("confluent", "aiokafka", "java")
SERVED = {0, 1, 2, 3, 18, 19}
FRAMES = sorted(GOLDEN.glob("*/*.bin"))


def _decode(payload: bytes) -> tuple[Any, Any, int]:
    api_key, version, _ = peek_header(payload)
    header = decode_request_header(payload, header_is_flexible(api_key, version))
    cls = REQUESTS[api_key]
    flexible = cls.flexible_version_q(version)
    decode = cls._struct.compiled_decode_from(
        version, compact=flexible, tagged=flexible, data_class=cls[None]
    )
    body, end = decode(memoryview(payload), header.size)
    return header, body, end


def test_every_client_has_a_frame_of_every_served_api() -> None:
    manifest = json.loads((GOLDEN / "MANIFEST.json").read_text())
    for client in CLIENTS:
        files = sorted((GOLDEN / client).glob("*.bin"))
        keys = {int(f.name.split("-")[0]) for f in files}
        assert keys == SERVED, f"{client}: golden frames for API keys {sorted(keys)}"
        assert client in manifest


@pytest.mark.parametrize("path", FRAMES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_golden_frame_decodes_and_reencodes_identically(path: Path) -> None:
    payload = path.read_bytes()
    header, body, end = _decode(payload)
    assert path.name.startswith(f"{header.api_key:02d}-") and path.stem.endswith(f"-v{header.api_version}")
    assert end == len(payload), f"{len(payload) - end} bytes left after the body"

    flexible = header_is_flexible(header.api_key, header.api_version)
    kp = KpRequestHeader(
        request_api_key=header.api_key,
        request_api_version=header.api_version,
        correlation_id=header.correlation_id,
        client_id=header.client_id,
    )
    assert kp.encode(flexible=flexible) == payload[: header.size], "request header re-encodes differently"
    # A decoded message re-encodes at its own version (encode(version=) needs a _header slot).
    assert body.encode() == payload[header.size :], "body re-encodes differently"
    assert REQUESTS[header.api_key].decode(body.encode(), version=header.api_version) == body


@pytest.mark.parametrize("path", [p for p in FRAMES if p.name.startswith("00-")], ids=lambda p: p.parent.name)
def test_golden_produce_carries_one_v2_batch(path: Path) -> None:
    _header, body, _ = _decode(path.read_bytes())
    records = body.topic_data[0].partition_data[0].records
    assert records[16] == 2, "magic"
    assert int.from_bytes(records[8:12], "big") + 12 == len(records), "exactly one whole batch"
