"""SaslHandshake (17) and SaslAuthenticate (36), as Kafka's SaslServerAuthenticator answers
them. Only a connection on a SASL listener has an `Authentication`; until it completes, the
connection serves nothing but these two and ApiVersions. A failed authentication is answered
SASL_AUTHENTICATION_FAILED with Kafka's message, then the connection closes. After a v0
handshake the tokens come as bare frames, which the connection hands to the `Authentication`
itself (v0 has no SaslAuthenticate)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from broker import metrics
from broker.api.registry import Handlers
from broker.security.sasl import AuthenticationFailed
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from broker.api.context import RequestContext

log = logging.getLogger(__name__)


async def handle_handshake(ctx: RequestContext, request: SaslHandshakeRequest) -> SaslHandshakeResponse:
    auth = ctx.auth
    if auth is None or auth.server is not None:
        return SaslHandshakeResponse(version=ctx.version, error_code=ErrorCode.ILLEGAL_SASL_STATE,
                                     mechanisms=[])
    enabled = list(auth.settings.mechanisms)
    if not auth.handshake(request.mechanism, bare_tokens=ctx.version == 0):
        auth.failed = True
        return SaslHandshakeResponse(version=ctx.version, error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                     mechanisms=enabled)
    return SaslHandshakeResponse(version=ctx.version, error_code=ErrorCode.NONE, mechanisms=enabled)


async def handle_authenticate(
    ctx: RequestContext, request: SaslAuthenticateRequest
) -> SaslAuthenticateResponse:
    auth = ctx.auth
    if auth is None or auth.server is None:
        return _authenticated(ctx, ErrorCode.ILLEGAL_SASL_STATE, "Unexpected SaslAuthenticate request")
    try:
        token = auth.authenticate(bytes(request.auth_bytes))
    except AuthenticationFailed as exc:
        auth.failed = True
        metrics.authentication_failed(ctx.caller.listener)
        log.info("authentication failed from %s on %s: %s", ctx.caller.host, ctx.caller.listener, exc)
        log.debug("authentication failure's cause: %r", exc.__cause__)
        return _authenticated(ctx, ErrorCode.SASL_AUTHENTICATION_FAILED, str(exc))
    return _authenticated(ctx, ErrorCode.NONE, None, token, auth.session_lifetime_ms)


def _authenticated(
    ctx: RequestContext, error: ErrorCode, message: str | None, token: bytes = b"", lifetime_ms: int = 0
) -> SaslAuthenticateResponse:
    return SaslAuthenticateResponse(
        version=ctx.version, error_code=error, error_message=message, auth_bytes=token,
        session_lifetime_ms=lifetime_ms,
    )


VERSIONS = {ApiKey.SASL_HANDSHAKE: (0, 1), ApiKey.SASL_AUTHENTICATE: (0, 2)}
HANDLERS: Handlers = {ApiKey.SASL_HANDSHAKE: handle_handshake, ApiKey.SASL_AUTHENTICATE: handle_authenticate}
