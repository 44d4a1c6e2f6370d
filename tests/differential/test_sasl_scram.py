"""SaslHandshake and SaslAuthenticate on a PLAINTEXT listener (the differential pair's: no SASL
there, so Kafka answers ILLEGAL_SASL_STATE), and Describe/AlterUserScramCredentials (KIP-554)
with their validation, compared with Kafka. SASL exchanges themselves are tested with real
clients in tests/integration/test_security_auth.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.differential.cases import Cases, versions
from tests.differential.runner import Side, Step, run_case
from tests.differential.steps import topic

SHA_256, SHA_512 = 1, 2


def user(side: Side, suffix: str = "") -> str:
    return f"u-{topic(side)}{suffix}"


def upsert(iterations: int = 8192, mechanism: int = SHA_512, suffix: str = "") -> Step:
    def request(side: Side) -> dict[str, Any]:
        return {"deletions": [], "upsertions": [{
            "name": user(side, suffix), "mechanism": mechanism, "iterations": iterations,
            "salt": b"0123456789abcdef", "salted_password": bytes(range(64)),
        }]}

    return Step(51, request)


def delete(mechanism: int = SHA_512, suffix: str = "") -> Step:
    return Step(51, lambda side: {"deletions": [{"name": user(side, suffix), "mechanism": mechanism}],
                                  "upsertions": []})


def describe(*suffixes: str) -> Step:
    return Step(50, lambda side: {"users": [{"name": user(side, s)} for s in suffixes]})


CASES: Cases = {}
for v in versions(17):
    CASES[f"sasl-handshake-v{v}-on-plaintext"] = [Step(17, {"mechanism": "PLAIN"}, version=v)]
for v in versions(36):
    CASES[f"sasl-authenticate-v{v}-on-plaintext"] = [Step(36, {"auth_bytes": b"\0a\0b"}, version=v)]
CASES["scram-upsert-describe-delete"] = [upsert(), describe(""), delete(), describe("")]
CASES["scram-both-mechanisms"] = [upsert(mechanism=SHA_256), upsert(), delete(SHA_256), describe("")]
CASES["scram-iterations-out-of-bounds"] = [upsert(iterations=100), upsert(iterations=20000), describe("")]
CASES["scram-unknown-mechanism"] = [upsert(mechanism=7), delete(mechanism=7)]
CASES["scram-delete-unknown-user"] = [delete(suffix="-none")]
CASES["scram-describe-unknown-and-twice"] = [upsert(), describe("", "-none"), describe("", "")]


def twice(deleted: int, upserted: int) -> Step:
    return Step(51, lambda side: {
        "deletions": [{"name": user(side), "mechanism": deleted}],
        "upsertions": [{"name": user(side), "mechanism": upserted, "iterations": 8192, "salt": b"s" * 16,
                        "salted_password": b"p" * 32}],
    })


CASES["scram-one-user-two-mechanisms-in-one-alter"] = [twice(SHA_512, SHA_256), upsert(),
                                                       twice(SHA_512, SHA_256)]
CASES["scram-one-user-one-mechanism-twice-in-one-alter"] = [twice(SHA_512, SHA_512), upsert(),
                                                            twice(SHA_512, SHA_512)]


@pytest.mark.parametrize("name", list(CASES))
def test_case(name: str, sides: tuple[Side, Side]) -> None:
    run_case(CASES[name], *sides)
