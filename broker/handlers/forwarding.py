"""Requests only the controller carries out: run here on the controller, forwarded to it
from any other broker (cluster mode), refused with NOT_CONTROLLER when it cannot be reached."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from broker.net.client import BrokerUnreachable

if TYPE_CHECKING:
    from broker.api.context import RequestContext

Handler = Callable[["RequestContext", Any], Awaitable[Any]]


def on_controller(handle: Handler, not_controller: Callable[[Any], Any]) -> Handler:
    """`not_controller(request)` builds the answer that says NOT_CONTROLLER for everything asked."""

    async def handle_or_forward(ctx: RequestContext, request: Any) -> Any:
        controller = ctx.services.controller
        if controller is None or controller.active:
            return await handle(ctx, request)
        try:
            return await controller.forward(request, ctx.version, ctx.caller)
        except BrokerUnreachable:
            return not_controller(request)

    return handle_or_forward
