"""WriteTxnMarkers: markers written where this broker leads, answered once replicated."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from protocol.api_keys import ApiKey

if TYPE_CHECKING:
    from broker.api.context import RequestContext

API_KEY = ApiKey.WRITE_TXN_MARKERS


async def handle(ctx: RequestContext, request: Any) -> Any:
    return await ctx.services.markers.write(request)


VERSIONS = {API_KEY: (0, 1)}
HANDLERS = {API_KEY: handle}
