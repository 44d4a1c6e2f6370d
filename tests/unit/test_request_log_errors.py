"""The request log and `kafka_network_requestmetrics_errors_total` see every error code of
every response shape the broker advertises: for each API and served version, a response
with every error field set (one element in every array) is encoded, decoded, and counted."""

from __future__ import annotations

from typing import Any

import pytest

from broker.handlers import HANDLER_TABLE
from broker.metrics import STATS, request_done
from broker.metrics.request_log import error_codes, error_summary
from protocol.client_codec import decode_response
from protocol.errors import ErrorCode
from protocol.headers import encode_response_header
from protocol.messages import RESPONSES

API_VERSIONS = 18
CODE = ErrorCode.CONCURRENT_TRANSACTIONS
SERVED = [(k, v) for k, h in sorted(HANDLER_TABLE.items()) for v in range(h.min_version, h.max_version + 1)]


def _build(struct: Any, version: int, cls: Any) -> tuple[Any, int]:
    """An instance of `cls` for `version`: every int16 `*error_code` field CODE, every other
    field its default, every array of structs one element; and how many error fields it has."""
    values: dict[str, Any] = {}
    errors = 0
    for f in struct._fields:
        if not f.for_version_q(version):
            continue
        if f.is_struct_array() or f.is_struct():
            item, n = _build(f, version, getattr(cls, f.type_str))
            values[f.name] = [item] if f.is_struct_array() else item
            errors += n
        elif f.type_str == "int16" and "error" in f.name:
            values[f.name] = CODE
            errors += 1
        else:
            default = f.default
            values[f.name] = default() if callable(default) else default
    return cls(**values), errors


def _round_trip(api_key: int, version: int) -> tuple[Any, int]:
    cls = RESPONSES[api_key]
    built, errors = _build(cls._struct, version, cls)
    if api_key == API_VERSIONS:  # with an error, the answer is read as v0 (KIP-511): count it as built
        return built, errors
    wire = encode_response_header(api_key, version, 7) + built.encode(version=version)
    return decode_response(api_key, version, wire), errors


@pytest.mark.parametrize(("api_key", "version"), SERVED)
def test_every_error_field_is_counted(api_key: int, version: int) -> None:
    response, errors = _round_trip(api_key, version)
    assert error_codes(response)[CODE] == errors
    if errors:
        assert CODE.name in error_summary(response)


def test_add_partitions_v3_partition_errors_reach_the_metric() -> None:
    """The response shape that hid CONCURRENT_TRANSACTIONS from the metric (issue 19)."""
    response, errors = _round_trip(24, 3)
    before = STATS.errors[(24, CODE)]
    request_done(24, 3, 0.0, 0.0, response)
    assert errors == 1
    assert STATS.errors[(24, CODE)] == before + 1
