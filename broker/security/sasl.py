"""SASL on a connection: the mechanisms' servers (PLAIN, SCRAM-SHA-256/512) and the
per-connection state that SaslHandshake and SaslAuthenticate move forward.

A connection on a SASL listener starts unauthenticated: only ApiVersions, SaslHandshake and
SaslAuthenticate are served (the connection enforces it). SaslHandshake picks the mechanism;
SaslAuthenticate carries its tokens until the server is complete, then the principal is
`User:<authorization id>`. A failed exchange raises AuthenticationFailed with Kafka's message;
the handler answers SASL_AUTHENTICATION_FAILED and the connection closes after that answer.
After a SaslHandshake v0 the tokens come as bare size-prefixed frames instead (`bare_tokens`),
which the connection hands over and answers in kind; a refused one closes it unanswered.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from scramp import ScramException
from scramp import ScramMechanism as ScrampMechanism

from broker.security.scram import ScramCredential, ScramMechanism

PLAIN = "PLAIN"
SUPPORTED = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class AuthenticationFailed(Exception):
    """Bad credentials or a malformed exchange; the message goes to the client."""


class SaslServer(Protocol):
    def evaluate(self, token: bytes) -> bytes: ...

    @property
    def complete(self) -> bool: ...

    @property
    def authorization_id(self) -> str: ...


class PlainServer:
    """RFC 4616 against static users (PlainLoginModule's `user_<name>` options)."""

    def __init__(self, users: dict[str, str]) -> None:
        self._users = users
        self._user: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        parts = token.decode("utf-8", "replace").split("\0")
        if len(parts) != 3:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens")
        authzid, user, password = parts
        if not user:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        if self._users.get(user) != password:
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        self._user = user
        return b""

    @property
    def complete(self) -> bool:
        return self._user is not None

    @property
    def authorization_id(self) -> str:
        assert self._user is not None
        return self._user


class RefusedServer:
    """A re-authentication that asked for another mechanism: its first token fails."""

    def __init__(self, message: str) -> None:
        self._message = message

    def evaluate(self, token: bytes) -> bytes:
        raise AuthenticationFailed(self._message)

    @property
    def complete(self) -> bool:
        return False

    @property
    def authorization_id(self) -> str:
        raise AssertionError("never complete")


Lookup = Callable[[ScramMechanism, str], ScramCredential | None]


def _sasl_name(name: str) -> str:
    """RFC 5802's saslname: `=2C` is `,` and `=3D` is `=`."""
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """RFC 5802 (scramp) against the stored credentials: client-first, server-first,
    client-final, server-final."""

    def __init__(self, mechanism: ScramMechanism, lookup: Lookup) -> None:
        self._mechanism = mechanism
        self._lookup = lookup
        self._server = ScrampMechanism(mechanism.mechanism_name).make_server(self._auth_info)
        self._user: str | None = None
        self._step = 0
        self._done = False

    def _auth_info(self, username: str) -> tuple[bytes, bytes, bytes, int]:
        name = _sasl_name(username)
        found = self._lookup(self._mechanism, name)
        if found is None:
            raise AuthenticationFailed(f"Authentication failed during authentication due to invalid "
                                       f"credentials with SASL mechanism {self._mechanism.mechanism_name}")
        self._user = name
        return found.salt, found.stored_key, found.server_key, found.iterations

    def evaluate(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
            self._step += 1
            if self._step == 1:
                self._server.set_client_first(text)
                return str(self._server.get_server_first()).encode()
            if self._step == 2:
                self._accept_repeated_client_nonce(text)
                self._server.set_client_final(text)
                final = str(self._server.get_server_final()).encode()
                self._done = True
                return final
        except (ScramException, UnicodeDecodeError, ValueError) as exc:
            raise AuthenticationFailed(
                f"Authentication failed during authentication due to invalid credentials with SASL "
                f"mechanism {self._mechanism.mechanism_name}"
            ) from exc
        raise AuthenticationFailed("Unexpected SASL token after the exchange completed")

    def _accept_repeated_client_nonce(self, client_final: str) -> None:
        """Kafka takes a client-final nonce that ends with the server-first one (ScramSaslServer's
        `endsWith`): librdkafka before 2.6.1, Debian's kcat among them, sends its own nonce again
        in front. The proof is still checked, over the message as the client sent it."""
        sent = next((part[2:] for part in client_final.split(",") if part.startswith("r=")), None)
        expected = self._server.nonce
        if sent is not None and sent != str(expected) and sent.endswith(str(expected)):
            self._server.nonce = type(expected)(sent)  # scramp compares its nonce with the sent one

    @property
    def complete(self) -> bool:
        return self._done

    @property
    def authorization_id(self) -> str:
        assert self._user is not None
        return self._user


@dataclass(frozen=True, slots=True)
class SaslSettings:
    """One listener's SASL: the enabled mechanisms, PLAIN's users, the SCRAM credentials."""

    mechanisms: tuple[str, ...]
    plain_users: dict[str, str] = field(default_factory=dict)
    scram: Lookup = lambda mechanism, user: None
    max_reauth_ms: int = 0  # connections.max.reauth.ms: a session's lifetime, 0 unlimited

    def server(self, mechanism: str) -> SaslServer:
        if mechanism == PLAIN:
            return PlainServer(self.plain_users)
        scram = ScramMechanism.named(mechanism)
        assert scram is not None, mechanism
        return ScramServer(scram, self.scram)


class Authentication:
    """A connection's SASL state: waiting for a handshake, mid-exchange, or done; once done,
    a new handshake of the same mechanism re-authenticates it (KIP-368)."""

    def __init__(self, settings: SaslSettings) -> None:
        self.settings = settings
        self.server: SaslServer | None = None  # an exchange under way
        self.mechanism: str | None = None
        self.principal: str | None = None  # set once authenticated
        self.expires_at: float | None = None  # monotonic end of the session, None: no end
        self.failed = False  # the connection closes once the failure is answered
        self.bare_tokens = False  # after SaslHandshake v0: the exchange's tokens are bare frames

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    @property
    def authenticated(self) -> bool:
        return self.principal is not None

    def handshake(self, mechanism: str, bare_tokens: bool = False) -> bool:
        """Start `mechanism`; False when it is not enabled on this listener. With `bare_tokens`
        (SaslHandshake v0) its tokens follow as bare frames rather than SaslAuthenticate requests."""
        if mechanism not in self.settings.mechanisms:
            return False
        self.bare_tokens = bare_tokens
        if self.authenticated and mechanism != self.mechanism:
            # as Kafka: the handshake succeeds, the SaslAuthenticate after it fails
            self.server = RefusedServer(f"SASL mechanism '{mechanism}' requested by client is not "
                                        f"supported for re-authentication of mechanism '{self.mechanism}'")
            return True
        self.server = self.settings.server(mechanism)
        self.mechanism = mechanism
        return True

    def authenticate(self, token: bytes) -> bytes:
        """One token of the exchange; AuthenticationFailed ends it."""
        if self.server is None:
            raise AuthenticationFailed("SaslAuthenticate before SaslHandshake")
        answer = self.server.evaluate(token)
        if self.server.complete:
            principal = f"User:{self.server.authorization_id}"
            self.server = None
            self.bare_tokens = False
            if self.principal is not None and principal != self.principal:
                raise AuthenticationFailed("Cannot change principals during re-authentication from "
                                           f"{self.principal.replace(':', '.', 1)}: "
                                           f"{principal.replace(':', '.', 1)}")
            self.principal = principal
            lifetime = self.settings.max_reauth_ms
            self.expires_at = time.monotonic() + lifetime / 1000 if lifetime > 0 else None
        return answer

    @property
    def session_lifetime_ms(self) -> int:
        """What SaslAuthenticate v1+ tells the client once authenticated (0: no end)."""
        return self.settings.max_reauth_ms if self.authenticated and self.server is None else 0
