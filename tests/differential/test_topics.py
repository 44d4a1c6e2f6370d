"""ApiVersions, Metadata, CreateTopics, DeleteTopics, CreatePartitions and DescribeCluster:
every version Gregor advertises, valid requests and their error cases."""

from __future__ import annotations

from typing import Any

import pytest

from tests.differential.cases import Cases, versions
from tests.differential.runner import Side, Step, run_case
from tests.differential.steps import create_topic, new_topic, topic, wait_ready


def metadata(v: int, names: list[str]) -> Step:
    def request(side: Side) -> dict[str, Any]:
        return {
            "topics": [{"name": topic(side, n)} for n in names],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        }

    return Step(3, request, version=v)


def delete_topics(v: int, suffix: str) -> Step:
    def request(side: Side) -> dict[str, Any]:
        name = topic(side, suffix)
        return {"topic_names": [name], "topics": [{"name": name}], "timeout_ms": 10000}

    return Step(20, request, version=v)


def create_partitions(v: int, count: int, validate_only: bool = False) -> Step:
    def request(side: Side) -> dict[str, Any]:
        return {
            "topics": [{"name": topic(side), "count": count, "assignments": None}],
            "timeout_ms": 10000,
            "validate_only": validate_only,
        }

    return Step(37, request, version=v)


CASES: Cases = {}
for v in versions(18):
    CASES[f"api-versions-v{v}"] = [
        Step(18, {"client_software_name": "gregor-diff", "client_software_version": "1.0"}, version=v)
    ]
for v in versions(3):
    # Below v4 a request cannot refuse auto-creation: the unknown topic is then created.
    CASES[f"metadata-v{v}"] = [*new_topic(2), metadata(v, ["", "-unknown" if v >= 4 else "-auto"])]
for v in versions(19):
    CASES[f"create-topics-v{v}"] = [
        create_topic(3, version=v),
        wait_ready(partitions=3),
        create_topic(1, version=v),
    ]  # the second: TOPIC_ALREADY_EXISTS
for v in versions(20):
    CASES[f"delete-topics-v{v}"] = [*new_topic(), delete_topics(v, ""), delete_topics(v, "-unknown")]
for v in versions(37):
    CASES[f"create-partitions-v{v}"] = [
        *new_topic(),
        create_partitions(v, 3),
        wait_ready(partitions=3),
        create_partitions(v, 2),
        create_partitions(v, 4, validate_only=True),
    ]
for v in versions(60):
    CASES[f"describe-cluster-v{v}"] = [
        Step(
            60,
            {
                "include_cluster_authorized_operations": False,
                "endpoint_type": 1,
                "include_fenced_brokers": False,
            },
            version=v,
        )
    ]
CASES["create-topics-invalid"] = [
    create_topic(-2, suffix="-p"),  # INVALID_PARTITIONS
    create_topic(1, suffix="-c", configs={"retention.ms": "soon"}),  # INVALID_CONFIG
    create_topic(1, suffix="-u", configs={"no.such.config": "1"}),  # INVALID_CONFIG
    create_topic(1, suffix="-v", configs={"cleanup.policy": "compact"}),
]
CASES["create-topics-bad-name"] = [
    Step(
        19,
        {
            "topics": [
                {"name": n, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
                for n in ("bad/name", "..", "x" * 250)
            ],
            "timeout_ms": 10000,
            "validate_only": False,
        },
    ),
    Step(
        19,
        {
            "topics": [
                {
                    "name": "rf-too-big",
                    "num_partitions": 1,
                    "replication_factor": 3,
                    "assignments": [],
                    "configs": [],
                }
            ],
            "timeout_ms": 10000,
            "validate_only": True,
        },
    ),
]


@pytest.mark.parametrize("name", list(CASES))
def test_case(name: str, sides: tuple[Side, Side]) -> None:
    run_case(CASES[name], *sides)
