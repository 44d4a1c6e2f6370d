"""DescribeAcls, CreateAcls and DeleteAcls at every version Gregor advertises, on brokers without
an authorizer (the differential pair runs none): SECURITY_DISABLED with Kafka's messages.
The ACL decisions themselves are tested against real clients in tests/integration/test_acls.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.differential.cases import Cases, versions
from tests.differential.runner import Side, Step, run_case
from tests.differential.steps import topic

TOPIC, ANY, LITERAL, MATCH = 2, 1, 3, 2
READ, ALLOW = 3, 3


def _filter(side: Side, pattern: int) -> dict[str, Any]:
    return {
        "resource_type_filter": TOPIC, "resource_name_filter": topic(side), "pattern_type_filter": pattern,
        "principal_filter": None, "host_filter": None, "operation": ANY, "permission_type": ANY,
    }


def describe(v: int, pattern: int = MATCH) -> Step:
    return Step(29, lambda side: _filter(side, pattern), version=v)


def create(v: int) -> Step:
    def request(side: Side) -> dict[str, Any]:
        return {"creations": [{
            "resource_type": TOPIC, "resource_name": topic(side), "resource_pattern_type": LITERAL,
            "principal": "User:alice", "host": "*", "operation": READ, "permission_type": ALLOW,
        }]}

    return Step(30, request, version=v)


def delete(v: int) -> Step:
    return Step(31, lambda side: {"filters": [_filter(side, ANY), _filter(side, LITERAL)]}, version=v)


CASES: Cases = {}
for v in versions(29):
    CASES[f"describe-acls-v{v}"] = [describe(v), describe(v, pattern=ANY)]
for v in versions(30):
    CASES[f"create-acls-v{v}"] = [create(v)]
for v in versions(31):
    CASES[f"delete-acls-v{v}"] = [delete(v)]


@pytest.mark.parametrize("name", list(CASES))
def test_case(name: str, sides: tuple[Side, Side]) -> None:
    run_case(CASES[name], *sides)
