"""ApiVersions: the versions of every API in the handler table (KIP-511 rules)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafka.protocol.metadata import ApiVersionsResponse

from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from broker.context import RequestContext
    from broker.server import Broker

API_KEY = 18
R = ApiVersionsResponse


def _api_keys(broker: Broker) -> list[Any]:
    return [
        R.ApiVersion(api_key=h.api_key, min_version=h.min_version, max_version=h.max_version)
        for h in sorted(broker.handlers.values(), key=lambda h: h.api_key)
    ]


async def handle(ctx: RequestContext, request: Any) -> Any:
    return R(error_code=ErrorCode.NONE, api_keys=_api_keys(ctx.broker), throttle_time_ms=0)


def unsupported_version_response(broker: Broker) -> bytes:
    """A v0 body with UNSUPPORTED_VERSION for an ApiVersions version we lack."""
    response = R(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=_api_keys(broker))
    return bytes(response.encode(version=0))


VERSIONS = {API_KEY: (0, 4)}
HANDLERS = {API_KEY: handle}
