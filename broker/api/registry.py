"""One table keyed by API key drives both dispatch and the ApiVersions answer."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from protocol.messages import REQUESTS, RESPONSES, Request, Response, schema_versions

# The table holds every API's handler, each typed strictly in its own module (its request class
# in, its response class out), so an entry of the table takes any API's (protocol.messages).
Handler = Callable[[Any, Request], Coroutine[Any, Any, Response]]
Handlers = Mapping[int, Handler]
# How an API's answer becomes bytes at a version: its own `encode`, unless its module names an
# encoder of its own (ENCODERS, e.g. Metadata's, which writes kept parts into the answer).
Encoder = Callable[[Any, Response, int], bytes]


def encode_response(ctx: object, response: Response, version: int) -> bytes:
    encoded: bytes = response.encode(version=version)
    return encoded


@dataclass(frozen=True, slots=True)
class ApiHandler:
    api_key: int
    min_version: int
    max_version: int
    request: type[Request]
    response: type[Response]
    handle: Handler
    advertised_max: int  # ApiVersions may show less than is served (broker-only versions)
    encode: Encoder = encode_response

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


def handler_from(module: ModuleType, api_key: int) -> ApiHandler:
    low, high = schema_versions(api_key)
    versions: dict[int, tuple[int, int]] = module.VERSIONS
    min_version, max_version = versions[api_key]
    assert max_version <= high and min_version >= 0, (api_key, min_version, max_version, low, high)
    handle = module.HANDLERS[api_key]
    advertised: dict[int, int] = getattr(module, "ADVERTISED_MAX", {})
    encoders: dict[int, Encoder] = getattr(module, "ENCODERS", {})
    return ApiHandler(
        api_key, min_version, max_version, REQUESTS[api_key], RESPONSES[api_key], handle,
        advertised.get(api_key, max_version), encoders.get(api_key, encode_response),
    )


def build_table(modules: list[ModuleType]) -> dict[int, ApiHandler]:
    table: dict[int, ApiHandler] = {}
    for module in modules:
        for api_key in module.VERSIONS:
            assert api_key not in table, f"API key {api_key} served twice"
            table[api_key] = handler_from(module, api_key)
    return table
