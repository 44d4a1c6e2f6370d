"""One task per connection: read a frame, decode, dispatch, answer in order.

Requests may be pipelined: each is handled in its own task, and a writer task
sends the responses in request order. Unreadable frames close the connection
with a log line; a request that decodes but is wrong gets its protocol error.

A request whose handler fails closes the connection after the answers owed
before it, and nothing queued behind it runs (Kafka reads the next request
only after answering the previous one). Tasks start in request order and a
handler runs synchronously until its first wait, so a request that fails
before waiting on anything has run alone: every request behind it sees the
failure and does nothing; one that fails after waiting stops those not yet
started. Produce requests append in request order even when one waits on a
transaction check (AppendTurn), as a producer's sequence numbers require.

After a SaslHandshake v0 the SASL tokens come as bare size-prefixed frames, without a request
header, until the exchange completes; each is answered by a bare frame, and a refused one
closes the connection unanswered (Kafka's SaslServerAuthenticator). Which kind the next frame
is depends on the answer before it, so the reader waits for those answers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from kafka.protocol.producer import ProduceResponse

from broker import metrics
from broker.api.context import AppendTurn, RequestContext
from broker.api.registry import ApiHandler
from broker.base.caller import Caller
from broker.base.faults import fail_point
from broker.front.answers import AnswerQueue
from broker.handlers import api_versions
from broker.metrics import request_log
from broker.security.forwarded import original_caller
from broker.security.listener import ListenerSecurity
from broker.security.sasl import Authentication, AuthenticationFailed
from broker.security.tls import certificate_principal, distinguished_name
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.framing import SIZE_PREFIX, Frame, FrameSizeError, frame, frame_parts, frame_size
from protocol.headers import (
    API_VERSIONS_KEY,
    HeaderDecodeError,
    RequestHeader,
    decode_request_header,
    encode_response_header,
    header_is_flexible,
    peek_header,
)
from protocol.messages import Request, RequestDecodeError, Response, decode_request

if TYPE_CHECKING:
    from broker.api.services import Services

log = logging.getLogger(__name__)
MAX_IN_FLIGHT = 100
PRODUCE = ApiKey.PRODUCE
BEFORE_AUTHENTICATION = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
REAUTHENTICATION = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
PLAINTEXT = ListenerSecurity("PLAINTEXT")


class CloseConnection(Exception):
    """The peer sent something we cannot answer; the reason is logged."""


class QuietClose(Exception):
    """An expected end: the connection closes after the answers before this one, logged as info."""


class Acks0Failed(QuietClose):
    """An acks=0 produce had an error: closing the connection is the only way to tell
    the producer (Kafka's rule), so it refreshes its metadata."""


class BareTokenRefused(QuietClose):
    """A SASL token after SaslHandshake v0 failed: v0 has no error answer, so Kafka closes."""


class Connection:
    def __init__(
        self, services: Services, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
        listener: str = "PLAINTEXT", security: ListenerSecurity = PLAINTEXT,
    ) -> None:
        self.services = services
        self.handlers = services.api_versions
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername") or ("?", 0)
        self.peer = f"{peer[0]}:{peer[1]}"
        self.caller = Caller(str(peer[0]), listener)  # the listener the client connected to
        self.security = security
        # SASL listeners: nothing but ApiVersions and SASL until authenticated
        self.auth = Authentication(security.sasl) if security.sasl is not None else None
        self.responses: AnswerQueue[asyncio.Task[Frame] | None] = AnswerQueue(MAX_IN_FLIGHT)
        self.debug = request_log.enabled()  # once: nothing per request when DEBUG is off
        self.requests = 0
        # Set by the first request whose handler fails: nothing behind it runs.
        self.failed: str | None = None
        # The newest produce request: the next one appends after it (AppendTurn).
        self.last_produce: AppendTurn | None = None
        # A SaslHandshake v0 or a bare token in flight: how the next frame reads depends on it.
        self.sasl_step: asyncio.Task[Frame] | None = None

    async def run(self) -> None:
        try:
            await self._serve()
        except asyncio.CancelledError:
            # Broker shutdown. Ending normally: asyncio's start_server callback (3.11)
            # logs a cancelled connection task as an error with a traceback.
            self.writer.close()

    def _certificate_principal(self) -> bool:
        """On a TLS listener without SASL, a client certificate names the principal (mapped by
        `ssl.principal.mapping.rules`); False when no rule applies to it."""
        if self.security.tls is None or self.auth is not None:
            return True
        cert = self.writer.get_extra_info("peercert")
        if not cert:
            return True
        principal = certificate_principal(cert, list(self.security.mapping))
        if principal is None:
            metrics.authentication_failed(self.caller.listener)
            log.warning("closing connection from %s: no ssl.principal.mapping.rules rule applies to %s",
                        self.peer, distinguished_name(cert))
            return False
        self.caller = replace(self.caller, principal=principal)
        return True

    async def _serve(self) -> None:
        if not self._certificate_principal():
            self.writer.close()
            return
        sender = asyncio.create_task(self._send_loop())
        shutdown = False
        try:
            await self._read_loop()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except CloseConnection as exc:
            log.warning("closing connection from %s: %s", self.peer, exc)
        except asyncio.CancelledError:
            shutdown = True
            self._abandon(sender)
            raise
        finally:
            if not shutdown:
                await self.responses.put(None)
                await self._finish(sender)

    def _abandon(self, sender: asyncio.Task[None]) -> None:
        """Broker shutdown: requests in flight (one may wait for replication) get no answer,
        as when a Kafka broker stops; the client retries elsewhere."""
        sender.cancel()
        while not self.responses.empty():
            task = self.responses.get_nowait()
            if task is not None:
                _discard(task)

    async def _finish(self, sender: asyncio.Task[None]) -> None:
        try:
            await sender
        except (ConnectionError, asyncio.CancelledError):
            pass
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass

    async def _read_loop(self) -> None:
        config = self.services.configs.config
        max_size = config.socket_request_max_bytes
        unauthenticated_max = config.for_listener(self.caller.listener, "sasl.server.max.receive.size")
        while self.failed is None:
            prefix = await self.reader.readexactly(SIZE_PREFIX)
            try:
                if self.auth is not None and not self.auth.authenticated:
                    size = frame_size(prefix, unauthenticated_max, "sasl.server.max.receive.size")
                else:
                    size = frame_size(prefix, max_size)
            except FrameSizeError as exc:
                raise CloseConnection(str(exc)) from None
            payload = await self.reader.readexactly(size)
            if self.failed is not None:
                return
            if self.auth is not None and self.auth.bare_tokens:
                self.sasl_step = asyncio.create_task(self._bare_token(payload))
                await self.responses.put(self.sasl_step)
            else:
                await self.responses.put(self._dispatch(payload))
            if self.sasl_step is not None:
                await asyncio.wait([self.sasl_step])
                self.sasl_step = None

    async def _bare_token(self, token: bytes) -> Frame:
        """A SASL token after SaslHandshake v0: the server's token framed bare; a refusal closes
        the connection unanswered and counts as a failed authentication."""
        assert self.auth is not None
        try:
            return [frame(self.auth.authenticate(token))]
        except AuthenticationFailed as exc:
            metrics.authentication_failed(self.caller.listener)
            log.debug("authentication failure's cause: %r", exc.__cause__)
            self.failed = f"SASL authentication on {self.caller.listener} failed: {exc}"
            raise BareTokenRefused(self.failed) from None

    def _dispatch(self, payload: bytes) -> asyncio.Task[Frame]:
        received = time.monotonic()
        header, handler = self._parse_header(payload)
        if handler is None:
            return asyncio.create_task(self._unsupported_api_versions(header))
        self._check_authenticated(header)
        body = memoryview(payload)[header.size :]
        try:
            request = decode_request(handler.api_key, header.api_version, body)
        except RequestDecodeError as exc:
            raise CloseConnection(
                f"cannot decode {handler.request.__name__} v{header.api_version} "
                f"(client {header.client_id!r}): {exc}; frame starts {bytes(payload[:48]).hex()}"
            ) from None
        turn = None
        if handler.api_key == PRODUCE:
            turn = self.last_produce = AppendTurn(self.last_produce)
        caller = original_caller(self.services.authorizer, self.caller, header.client_id)
        ctx = RequestContext(self.services, header, caller, turn, self.auth)
        answer = not (handler.api_key == PRODUCE and request.acks == 0)  # acks=0: no response
        task = asyncio.create_task(self._respond(ctx, handler, request, answer, received))
        if handler.api_key == ApiKey.SASL_HANDSHAKE and header.api_version == 0:
            self.sasl_step = task  # bare tokens follow if it succeeds
        return task

    def _check_authenticated(self, header: RequestHeader) -> None:
        """Before SASL completes only ApiVersions and the SASL requests are served (Kafka closes
        the connection on anything else); once it has, the principal is the caller's."""
        auth = self.auth
        if auth is None:
            return
        if auth.principal is not None:
            if auth.expired(time.monotonic()) and header.api_key not in REAUTHENTICATION:
                raise CloseConnection(f"{ApiKey(header.api_key).name} request after the SASL session "
                                      f"of {auth.principal} expired (connections.max.reauth.ms)")
            if self.caller.principal != auth.principal:
                self.caller = replace(self.caller, principal=auth.principal)
            return
        if header.api_key not in BEFORE_AUTHENTICATION:
            raise CloseConnection(f"{ApiKey(header.api_key).name} request before SASL authentication")

    def _parse_header(self, payload: bytes) -> tuple[RequestHeader, ApiHandler | None]:
        try:
            api_key, api_version, _ = peek_header(payload)
            handler = self.handlers.get(api_key)
            if handler is None or not handler.supports(api_version):
                if api_key == API_VERSIONS_KEY:
                    return decode_request_header(payload, False), None
                raise CloseConnection(
                    f"unsupported API key {api_key} version {api_version}"
                    + ("" if handler else " (unknown API)")
                )
            flexible = header_is_flexible(api_key, api_version)
            return decode_request_header(payload, flexible), handler
        except HeaderDecodeError as exc:
            raise CloseConnection(f"bad request header: {exc}") from None

    async def _respond(
        self, ctx: RequestContext, handler: ApiHandler, request: Request, answer: bool, received: float
    ) -> Frame:
        """The framed response, [] when none is sent; raises when the handler fails."""
        try:
            return await self._handle(ctx, handler, request, answer, received)
        finally:
            if ctx.turn is not None:
                ctx.turn.done()

    async def _handle(
        self, ctx: RequestContext, handler: ApiHandler, request: Request, answer: bool, received: float
    ) -> Frame:
        if self.failed is not None:
            return []  # an earlier request failed: the connection closes before this one
        header = ctx.header
        started = time.monotonic()
        try:
            fail_point(f"request-{header.api_key}")
            response = await handler.handle(ctx, request)
            body = handler.encode(ctx, response, header.api_version) if answer else None
        except Exception:
            self.failed = f"{handler.request.__name__} v{header.api_version} failed"
            raise
        metrics.request_done(header.api_key, header.api_version, received, started, response)
        if self.debug:
            self._log_request(header, handler, started, response if answer else None)
        if body is None:
            if (errors := _produce_errors(response)):
                self.failed = f"acks=0 produce failed ({errors})"
                raise Acks0Failed(self.failed)
            return []
        head = encode_response_header(header.api_key, header.api_version, header.correlation_id)
        return frame_parts(head, body)

    def _log_request(
        self, header: RequestHeader, handler: ApiHandler, started: float, response: Response
    ) -> None:
        self.requests += 1
        request_log.answered(self.peer, header, request_log.api_name(handler.request), started, response)

    async def _unsupported_api_versions(self, header: RequestHeader) -> Frame:
        body = api_versions.unsupported_version_response(self.handlers)
        head = encode_response_header(header.api_key, 0, header.correlation_id)
        return frame_parts(head, body)

    async def _send_loop(self) -> None:
        """Write answers in request order until the None that ends the connection.
        After a failure, the tasks still queued are cancelled, never awaited."""
        closing = False
        while (task := await self.responses.get()) is not None:
            if closing:
                _discard(task)
                continue
            try:
                parts = await task
            except QuietClose as exc:
                if isinstance(exc, BareTokenRefused):
                    await self._delay_failed_authentication()
                log.info("closing connection from %s: %s", self.peer, exc)
                closing = True
                self.writer.close()
                continue
            except Exception:
                log.exception("%s on connection %s; closing it, running nothing behind it",
                              self.failed, self.peer)
                closing = True
                self.writer.close()
                continue
            if not parts:
                continue
            if self.auth is not None and self.auth.failed:
                await self._delay_failed_authentication()
            if self.writer.is_closing():  # the client went away (uvloop refuses the write)
                closing = True
                continue
            try:
                self.writer.writelines(parts)
                await self.writer.drain()
            except ConnectionError:
                closing = True
            if self.auth is not None and self.auth.failed:
                closing = True  # the SASL failure is answered: Kafka closes the connection
                self.failed = "SASL authentication failed"
                self.writer.close()


    async def _delay_failed_authentication(self) -> None:
        """Kafka's `connection.failed.authentication.delay.ms`: the failure's answer and the close
        after it wait, so a client guessing passwords gets few tries a second per connection."""
        await asyncio.sleep(self.services.configs.config.connection_failed_authentication_delay_ms / 1000)


def _produce_errors(response: ProduceResponse) -> str:
    """The partition errors of a Produce response, e.g. "t-0 CORRUPT_MESSAGE"; "" if none."""
    return ", ".join(
        f"{t.name}-{p.index} {ErrorCode(p.error_code).name}"
        for t in response.responses
        for p in t.partition_responses
        if p.error_code != ErrorCode.NONE
    )


def _discard(task: asyncio.Task[Frame]) -> None:
    if task.done():
        if not task.cancelled():
            task.exception()  # retrieved: a second failure behind the first is not logged
    else:
        task.cancel()
