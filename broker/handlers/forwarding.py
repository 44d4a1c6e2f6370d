"""Requests only the controller carries out: run here on the controller, forwarded to it
from any other broker (cluster mode), refused with NOT_CONTROLLER when it cannot be reached."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar, cast

from broker.net.client import BrokerUnreachable

if TYPE_CHECKING:
    from broker.api.context import RequestContext

Req = TypeVar("Req")
Resp = TypeVar("Resp")
Handle = Callable[["RequestContext", Req], Coroutine[Any, Any, Resp]]


def on_controller(handle: Handle[Req, Resp], not_controller: Callable[[Req], Resp]) -> Handle[Req, Resp]:
    """`not_controller(request)` builds the answer that says NOT_CONTROLLER for everything asked."""

    async def handle_or_forward(ctx: RequestContext, request: Req) -> Resp:
        controller = ctx.services.controller
        if controller is None or controller.active:
            return await handle(ctx, request)
        try:  # the controller's answer is decoded as this API's response at this version
            return cast(Resp, await controller.forward(request, ctx.version, ctx.caller))
        except BrokerUnreachable:
            return not_controller(request)

    return handle_or_forward
