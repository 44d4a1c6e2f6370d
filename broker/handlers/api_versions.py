"""ApiVersions: the versions of every API in the handler table (KIP-511 rules), and the
supported and finalized features as Kafka 4.x reports them."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.types import TV2

if TYPE_CHECKING:
    from broker.api.context import RequestContext
    from broker.api.registry import ApiHandler, Handlers
    from broker.config import BrokerConfig

API_KEY = ApiKey.API_VERSIONS
R = ApiVersionsResponse
TRANSACTION_VERSION = "transaction.version"
# Kafka's epoch of the finalized features is the metadata offset that set them: it only grows.
# A Gregor broker's levels are fixed for its run, so its start time serves: a client that
# reconnects to a broker restarted with another transaction.version sees a newer epoch and
# takes the new level (Kafka's clients ignore features with an epoch they have already seen).
FEATURES_EPOCH = int(time.time() * 1000)
FIRST_VERSION_WITH_LEVEL_0 = 4  # KAFKA-17492: older requests get no feature whose minimum is 0


# a handler table (kept, so its id is not reused) and its answer's api_keys, by the table's id
_API_KEYS: dict[int, tuple[Mapping[int, ApiHandler], list[R.ApiVersion]]] = {}


def _api_keys(table: Mapping[int, ApiHandler]) -> list[R.ApiVersion]:
    """Built once per handler table (every new connection asks; the table never changes)."""
    found = _API_KEYS.get(id(table))
    if found is None:
        found = _API_KEYS[id(table)] = (table, [
            R.ApiVersion(api_key=h.api_key, min_version=h.min_version, max_version=h.advertised_max)
            for h in sorted(table.values(), key=lambda h: h.api_key)
        ])
    return found[1]


def _supported_features(version: int) -> list[R.SupportedFeatureKey]:
    """transaction.version 0-2 is supported; Kafka's ApiVersionsResponse omits a feature whose
    minimum is 0 from answers below v4 (older clients fail to parse it)."""
    supported = [(TRANSACTION_VERSION, 0, TV2)]
    return [
        R.SupportedFeatureKey(name=name, min_version=low, max_version=high)
        for name, low, high in supported
        if low > 0 or version >= FIRST_VERSION_WITH_LEVEL_0
    ]


def _finalized_features(config: BrokerConfig) -> list[R.FinalizedFeatureKey]:
    """Kafka lists a finalized feature with min and max both at its level, and none at level 0.
    A 4.x client uses transaction version 2 only when this level is 2."""
    level = config.transaction_version
    return [R.FinalizedFeatureKey(name=TRANSACTION_VERSION, max_version_level=level, min_version_level=level)]


# Kafka's ApiVersionsRequest.isValid (v3+): otherwise INVALID_REQUEST, no api keys.
SOFTWARE_NAME_VERSION = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def _valid(ctx: RequestContext, request: ApiVersionsRequest) -> bool:
    if ctx.version < 3:
        return True
    name, version = request.client_software_name, request.client_software_version
    return all(SOFTWARE_NAME_VERSION.fullmatch(v) is not None for v in (name, version))


async def handle(ctx: RequestContext, request: ApiVersionsRequest) -> ApiVersionsResponse:
    if not _valid(ctx, request):
        return R(error_code=ErrorCode.INVALID_REQUEST, api_keys=[], throttle_time_ms=0)
    return R(
        error_code=ErrorCode.NONE, api_keys=_api_keys(ctx.services.api_versions), throttle_time_ms=0,
        supported_features=_supported_features(ctx.version),
        finalized_features_epoch=FEATURES_EPOCH,
        finalized_features=_finalized_features(ctx.services.configs.config),
    )


def unsupported_version_response(table: Mapping[int, ApiHandler]) -> bytes:
    """A v0 body with UNSUPPORTED_VERSION for an ApiVersions version we lack."""
    response = R(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=_api_keys(table))
    return bytes(response.encode(version=0))


VERSIONS = {API_KEY: (0, 4)}
HANDLERS: Handlers = {API_KEY: handle}
