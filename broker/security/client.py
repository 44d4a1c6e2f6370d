"""The brokers' own connections to each other (replication, markers, transaction checks,
forwarding) on the inter-broker listener's security protocol: TLS against the listener's
truststore (with its keystore as the client certificate, and `ssl.endpoint.identification.
algorithm` https checking the host), SASL with `sasl.mechanism.inter.broker.protocol` and the
username and password of the listener's JAAS entry for that mechanism, as a Kafka broker does."""

from __future__ import annotations

import asyncio
import ssl
import struct
from dataclasses import dataclass

from kafka.protocol.sasl import SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest
from scramp import ScramClient, ScramException

from broker.config import BrokerConfig, ConfigError
from broker.security.jaas import JaasError, parse_jaas
from broker.security.tls import inter_broker_tls
from protocol.client_codec import decode_response, encode_request
from protocol.framing import frame
from protocol.messages import Request, Response

HANDSHAKE_VERSION, AUTHENTICATE_VERSION = 1, 2
_SIZE = struct.Struct(">i")


class AuthenticationError(ConnectionError):
    """The other broker refused this broker's credentials."""


@dataclass(frozen=True)
class ClientSecurity:
    tls: ssl.SSLContext | None = None
    mechanism: str | None = None  # SASL; None: no SASL
    username: str = ""
    password: str = ""

    async def authenticate(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                           client_id: str) -> int:
        """The SASL exchange on a fresh connection, before any other request; the session's
        lifetime in ms the other broker granted (0: unlimited)."""
        if self.mechanism is None:
            return 0
        handshake = await _call(reader, writer, SaslHandshakeRequest(mechanism=self.mechanism),
                                HANDSHAKE_VERSION, client_id)
        if handshake.error_code != 0:
            raise AuthenticationError(f"SASL mechanism {self.mechanism} refused "
                                      f"(enabled: {', '.join(handshake.mechanisms)})")
        if self.mechanism == "PLAIN":
            plain = await _step(reader, writer, client_id, f"\0{self.username}\0{self.password}".encode())
            return int(plain.session_lifetime_ms)
        scram = ScramClient([self.mechanism], self.username, self.password)
        server_first = await _step(reader, writer, client_id, scram.get_client_first().encode())
        try:
            scram.set_server_first(bytes(server_first.auth_bytes).decode())
            server_final = await _step(reader, writer, client_id, scram.get_client_final().encode())
            scram.set_server_final(bytes(server_final.auth_bytes).decode())
        except (ScramException, UnicodeDecodeError) as exc:
            raise AuthenticationError(f"SCRAM exchange with the other broker failed: {exc}") from None
        return int(server_final.session_lifetime_ms)


async def _step(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str, token: bytes
) -> SaslAuthenticateResponse:
    """One SaslAuthenticate exchange: the answer (its token and session lifetime)."""
    request = SaslAuthenticateRequest(auth_bytes=token)
    answer: SaslAuthenticateResponse = await _call(reader, writer, request, AUTHENTICATE_VERSION, client_id)
    if answer.error_code != 0:
        raise AuthenticationError(answer.error_message or "SASL authentication failed")
    return answer


async def _call(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, message: Request, version: int,
                client_id: str) -> Response:
    writer.write(frame(encode_request(message, version, 1, client_id)))
    (size,) = _SIZE.unpack(await reader.readexactly(4))
    return decode_response(message.API_KEY, version, await reader.readexactly(size))


def inter_broker_security(config: BrokerConfig) -> ClientSecurity | None:
    """How this broker connects to the others; None: PLAINTEXT."""
    listener = config.inter_broker_listener
    protocol = config.security_protocol(listener)
    if protocol == "PLAINTEXT":
        return None
    tls = inter_broker_tls(config)
    if not protocol.startswith("SASL_"):
        return ClientSecurity(tls)
    mechanism = config.sasl_mechanism_inter_broker_protocol.upper()
    key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    text = str(config.values.get(key) or config.sasl_jaas_config or "")
    try:
        options = parse_jaas(text).options if text else {}
    except JaasError as exc:
        raise ConfigError(f"{key}: {exc}") from None
    if not options.get("username") or not options.get("password"):
        raise ConfigError(f"{key}: the brokers authenticate to each other with its username and password; "
                          "set both")
    return ClientSecurity(tls, mechanism, options["username"], options["password"])

