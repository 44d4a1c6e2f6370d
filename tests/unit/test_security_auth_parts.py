"""The pure parts of authentication: JAAS entries, certificate principals and their mapping
rules, SCRAM credentials and the SASL servers' exchanges (issue 21)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

import pytest
from scramp import ScramClient

from broker.security.jaas import JaasError, parse_jaas
from broker.security.sasl import Authentication, AuthenticationFailed, PlainServer, SaslSettings, ScramServer
from broker.security.scram import ScramCredential, ScramMechanism, credential_problem
from broker.security.tls import certificate_principal, distinguished_name, parse_rules
from broker.tools.common import ToolError
from broker.tools.configs import parse_add_config

CERT = {"subject": ((("countryName", "US"),), (("organizationName", "Acme, Inc"),),
                    (("commonName", "Alice"),))}


def test_jaas_entry_with_quoted_and_bare_values() -> None:
    entry = parse_jaas('org.apache.kafka.common.security.plain.PlainLoginModule required\n'
                       '  username="admin" password="a;b=c" user_admin="a;b=c" user_bob=bob-pw;')
    assert entry.flag == "required"
    assert entry.options["password"] == "a;b=c"
    assert entry.users() == {"admin": "a;b=c", "bob": "bob-pw"}


@pytest.mark.parametrize("text", ["", "Module required user=x", "Module always;", 'Module required user;'])
def test_jaas_refuses_what_is_not_an_entry(text: str) -> None:
    with pytest.raises(JaasError):
        parse_jaas(text)


def test_distinguished_name_is_rfc_2253_last_rdn_first() -> None:
    assert distinguished_name(CERT) == "CN=Alice,O=Acme\\, Inc,C=US"


def test_mapping_rules_apply_in_order_with_case() -> None:
    rules = parse_rules("RULE:^CN=(.*?),O=(.*?)\\\\, Inc,C=US$/$1@$2/L, DEFAULT")
    assert certificate_principal(CERT, rules) == "User:alice@acme"
    assert certificate_principal(CERT, parse_rules("DEFAULT")) == "User:CN=Alice,O=Acme\\, Inc,C=US"
    assert certificate_principal(CERT, parse_rules("RULE:^CN=Bob.*$/bob/")) is None
    assert certificate_principal(None, parse_rules("DEFAULT")) is None
    with pytest.raises(ValueError):
        parse_rules("RULE:nope")


def test_plain_checks_user_password_and_authorization_id() -> None:
    users = {"alice": "pw"}
    server = PlainServer(users)
    server.evaluate(b"\0alice\0pw")
    assert server.complete and server.authorization_id == "alice"
    for token, message in [(b"\0alice\0bad", "Invalid username or password"),
                           (b"bob\0alice\0pw", "authorization id that is different"),
                           (b"alice\0pw", "expected 3 tokens")]:
        with pytest.raises(AuthenticationFailed, match=message):
            PlainServer(users).evaluate(token)


def test_bare_tokens_last_from_a_v0_handshake_to_the_end_of_its_exchange() -> None:
    auth = Authentication(SaslSettings(("PLAIN",), {"alice": "pw"}))
    assert not auth.handshake("GSSAPI", bare_tokens=True) and not auth.bare_tokens
    assert auth.handshake("PLAIN", bare_tokens=True) and auth.bare_tokens
    assert auth.authenticate(b"\0alice\0pw") == b""
    assert auth.principal == "User:alice" and not auth.bare_tokens  # requests from here on
    assert auth.handshake("PLAIN") and not auth.bare_tokens  # a v1 re-authentication


@pytest.mark.parametrize("mechanism", [ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512])
def test_scram_exchange_against_a_stored_credential(mechanism: ScramMechanism) -> None:
    stored = ScramCredential.from_password(mechanism, "s3cret", os.urandom(32), 4096)
    assert ScramCredential.from_json(stored.to_json()) == stored

    def attempt(password: str) -> str:
        server = ScramServer(mechanism, lambda m, user: stored if (m, user) == (mechanism, "a,b") else None)
        client = ScramClient([mechanism.mechanism_name], "a,b", password)
        client.set_server_first(server.evaluate(client.get_client_first().encode()).decode())
        client.set_server_final(server.evaluate(client.get_client_final().encode()).decode())
        assert server.complete
        return server.authorization_id

    assert attempt("s3cret") == "a,b"
    with pytest.raises(AuthenticationFailed):
        attempt("wrong")


def repeated_nonce_final(
    mechanism: ScramMechanism, password: str, client_first: str, server_first: str
) -> str:
    """librdkafka's client-final before 2.6.1: its own nonce, then the server-first nonce."""
    algorithm = "sha" + mechanism.mechanism_name.rsplit("-", 1)[1]
    attrs = dict(part.split("=", 1) for part in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(algorithm, password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", algorithm).digest()
    stored_key = hashlib.new(algorithm, client_key).digest()
    client_nonce = client_first.rsplit("r=", 1)[1]
    without_proof = f"c=biws,r={client_nonce}{attrs['r']}"
    auth = f"{client_first[3:]},{server_first},{without_proof}".encode()
    signature = hmac.new(stored_key, auth, algorithm).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}"


@pytest.mark.parametrize("mechanism", [ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512])
def test_scram_takes_a_client_nonce_repeated_in_front_as_kafka_does(mechanism: ScramMechanism) -> None:
    stored = ScramCredential.from_password(mechanism, "s3cret", os.urandom(32), 4096)

    def attempt(password: str, garble: bool = False) -> bytes:
        server = ScramServer(mechanism, lambda m, user: stored)
        client_first = "n,,n=alice,r=Ab-=~xyz"
        server_first = server.evaluate(client_first.encode()).decode()
        final = repeated_nonce_final(mechanism, password, client_first, server_first)
        if garble:  # a nonce that does not end with the server's
            final = final.replace(",p=", "x,p=")
        answer = server.evaluate(final.encode())
        assert server.complete and server.authorization_id == "alice"
        return answer

    assert attempt("s3cret").startswith(b"v=")
    for password, garble in [("wrong", False), ("s3cret", True)]:
        with pytest.raises(AuthenticationFailed):
            attempt(password, garble)


def test_credential_bounds_are_kafkas() -> None:
    assert credential_problem(ScramMechanism.SCRAM_SHA_256, 4096) is None
    assert credential_problem(ScramMechanism.SCRAM_SHA_256, 4095) is not None
    assert credential_problem(ScramMechanism.SCRAM_SHA_512, 16385) is not None
    assert credential_problem(None, 8192) == "Unknown SCRAM mechanism"


def test_configs_add_config_is_kafka_configs_scram_syntax() -> None:
    assert parse_add_config('SCRAM-SHA-256=[iterations=8192,password=pw],SCRAM-SHA-512=[password="x"]') == [
        ("SCRAM-SHA-256", "pw", 8192), ("SCRAM-SHA-512", "x", 4096)]
    for bad in ("SCRAM-SHA-1=[password=x]", "SCRAM-SHA-256=[iterations=9]",
                "SCRAM-SHA-256=[salt=s,password=p]",
                "SCRAM-SHA-256=[iterations=many,password=p]", "SCRAM-SHA-256=[password=a,b]"):
        with pytest.raises(ToolError):
            parse_add_config(bad)
