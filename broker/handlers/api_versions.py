"""ApiVersions: the versions of every API in the handler table (KIP-511 rules)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from kafka.protocol.metadata import ApiVersionsResponse

from coordinator.transaction import TV2
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


# transaction.version 2 (KIP-890 part 2) is finalized: clients that read it may
# use EndTxn v5 and Produce v12+; clients that do not keep the older protocol.
FEATURES_EPOCH = 1
TRANSACTION_VERSION = "transaction.version"


# Kafka's ApiVersionsRequest.isValid (v3+): otherwise INVALID_REQUEST, no api keys.
SOFTWARE_NAME_VERSION = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def _valid(ctx: RequestContext, request: Any) -> bool:
    if ctx.version < 3:
        return True
    name, version = request.client_software_name, request.client_software_version
    return all(SOFTWARE_NAME_VERSION.fullmatch(v) is not None for v in (name, version))


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not _valid(ctx, request):
        return R(error_code=ErrorCode.INVALID_REQUEST, api_keys=[], throttle_time_ms=0)
    return R(
        error_code=ErrorCode.NONE, api_keys=_api_keys(ctx.broker), throttle_time_ms=0,
        supported_features=[R.SupportedFeatureKey(name=TRANSACTION_VERSION, min_version=0, max_version=TV2)],
        finalized_features_epoch=FEATURES_EPOCH,
        finalized_features=[
            R.FinalizedFeatureKey(name=TRANSACTION_VERSION, max_version_level=TV2, min_version_level=TV2)
        ],
    )


def unsupported_version_response(broker: Broker) -> bytes:
    """A v0 body with UNSUPPORTED_VERSION for an ApiVersions version we lack."""
    response = R(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=_api_keys(broker))
    return bytes(response.encode(version=0))


VERSIONS = {API_KEY: (0, 4)}
HANDLERS = {API_KEY: handle}
