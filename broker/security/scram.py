"""SCRAM credentials as Kafka stores them (KIP-554): salt, stored key, server key and
iterations per user and mechanism; never the password.

AlterUserScramCredentials carries the client-salted password; the stored and server keys are
derived from it here (RFC 5802: StoredKey = H(HMAC(SaltedPassword, "Client Key")),
ServerKey = HMAC(SaltedPassword, "Server Key")).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass
from enum import IntEnum
from typing import Any


class ScramMechanism(IntEnum):
    """Kafka's ScramMechanism codes on the wire."""

    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def mechanism_name(self) -> str:
        return self.name.replace("_", "-")

    @property
    def digest(self) -> str:
        return "sha256" if self == ScramMechanism.SCRAM_SHA_256 else "sha512"

    @classmethod
    def named(cls, name: str) -> ScramMechanism | None:
        return next((m for m in cls if m != cls.UNKNOWN and m.mechanism_name == name.upper()), None)


MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384  # Kafka's ScramMechanism bounds


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_salted_password(
        cls, mechanism: ScramMechanism, salt: bytes, salted: bytes, iterations: int
    ) -> ScramCredential:
        client_key = hmac.new(salted, b"Client Key", mechanism.digest).digest()
        stored = hashlib.new(mechanism.digest, client_key).digest()
        server = hmac.new(salted, b"Server Key", mechanism.digest).digest()
        return cls(salt, stored, server, iterations)

    @classmethod
    def from_password(
        cls, mechanism: ScramMechanism, password: str, salt: bytes, iterations: int
    ) -> ScramCredential:
        salted = hashlib.pbkdf2_hmac(mechanism.digest, password.encode(), salt, iterations)
        return cls.from_salted_password(mechanism, salt, salted, iterations)

    def to_json(self) -> list[Any]:
        b64 = base64.b64encode
        return [b64(self.salt).decode(), b64(self.stored_key).decode(), b64(self.server_key).decode(),
                self.iterations]

    @classmethod
    def from_json(cls, data: list[Any]) -> ScramCredential:
        salt, stored, server, iterations = data
        b64 = base64.b64decode
        return cls(b64(salt), b64(stored), b64(server), int(iterations))


def credential_problem(mechanism: ScramMechanism | None, iterations: int) -> str | None:
    """Why an upsertion is unacceptable (Kafka's messages), None when it is fine."""
    if mechanism is None or mechanism == ScramMechanism.UNKNOWN:
        return "Unknown SCRAM mechanism"
    if iterations < MIN_ITERATIONS:
        return f"Too few iterations: {iterations} (minimum {MIN_ITERATIONS})"
    if iterations > MAX_ITERATIONS:
        return f"Too many iterations: {iterations} (maximum {MAX_ITERATIONS})"
    return None
