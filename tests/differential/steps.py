"""Step builders shared by the corpus: topics, records, waits. Every topic name derives from
the case's `vars["t"]`, the same on both brokers."""

from __future__ import annotations

import time
from typing import Any

from tests.differential.runner import Action, Side, Step
from tests.integration.wire import build_batch

TS = 1_700_000_000_000  # every record's timestamp: answers carrying timestamps compare equal
WAIT_S = 20.0


def topic(side: Side, suffix: str = "") -> str:
    return str(side.vars["t"]) + suffix


def create_topic(
    partitions: int = 1,
    suffix: str = "",
    configs: dict[str, str] | None = None,
    compare: bool = True,
    version: int | None = None,
) -> Step:
    def request(side: Side) -> dict[str, Any]:
        return {
            "topics": [
                {
                    "name": topic(side, suffix),
                    "num_partitions": partitions,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
                }
            ],
            "timeout_ms": 10000,
            "validate_only": False,
        }

    return Step(19, request, version=version, compare=compare)


def wait_ready(suffix: str = "", partitions: int = 1) -> Action:
    """Until Metadata shows a leader for every partition (and learn the topic id)."""

    def action(side: Side) -> None:
        deadline = time.monotonic() + WAIT_S
        name = topic(side, suffix)
        while True:
            resp = side.client.metadata([name], version=12)
            t = resp.topics[0]
            if (
                t.error_code == 0
                and len(t.partitions) == partitions
                and all(p.error_code == 0 and p.leader_id >= 0 for p in t.partitions)
                and _leads(side, name, partitions)
            ):
                side.vars[f"id{suffix}"] = t.topic_id
                return
            assert time.monotonic() < deadline, f"{side.name}: {name} not ready: {resp}"
            time.sleep(0.05)

    return action


def _leads(side: Side, name: str, partitions: int) -> bool:
    """The broker answers ListOffsets for every partition (Kafka's metadata may name it leader a
    moment before its replica manager is)."""
    from tests.differential.messages import build

    req = build(
        2,
        5,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {
                    "name": name,
                    "partitions": [{"partition_index": i, "timestamp": -1} for i in range(partitions)],
                }
            ],
        },
    )
    return all(p.error_code == 0 for p in side.client.call(req, 5).topics[0].partitions)


def new_topic(partitions: int = 1, suffix: str = "", configs: dict[str, str] | None = None) -> list[Any]:
    """Set-up: a topic created (not compared) and ready on both brokers."""
    return [create_topic(partitions, suffix, configs, compare=False), wait_ready(suffix, partitions)]


def batch(values: list[bytes], **kw: Any) -> bytes:
    return build_batch(values, keys=[b"k%d" % i for i in range(len(values))], base_timestamp=TS, **kw)


def produce(
    records: bytes | None = None,
    partition: int = 0,
    suffix: str = "",
    version: int | None = None,
    acks: int = -1,
    transactional_id: str | None = None,
    compare: bool = True,
) -> Step:
    data = batch([b"a", b"b", b"c"]) if records is None else records

    def request(side: Side) -> dict[str, Any]:
        return {
            "transactional_id": transactional_id,
            "acks": acks,
            "timeout_ms": 10000,
            "topic_data": [
                {
                    "name": topic(side, suffix),
                    "topic_id": side.vars.get(f"id{suffix}"),
                    "partition_data": [{"index": partition, "records": data}],
                }
            ],
        }

    return Step(0, request, version=version, compare=compare)


def learn_producer(key: str = "pid") -> Any:
    def learn(side: Side, resp: Any) -> None:
        side.vars[key] = (resp.producer_id, resp.producer_epoch)

    return learn


def init_producer(
    transactional_id: str | None = None, version: int | None = None, key: str = "pid", compare: bool = True
) -> Step:
    return Step(
        22,
        {
            "transactional_id": transactional_id,
            "transaction_timeout_ms": 60000,
            "producer_id": -1,
            "producer_epoch": -1,
        },
        version=version,
        learn=learn_producer(key),
        compare=compare,
    )


def wait_lso(offset: int, partition: int = 0, suffix: str = "") -> Action:
    """Until the last stable offset reaches `offset` (a transaction's markers are written)."""

    def action(side: Side) -> None:
        deadline = time.monotonic() + WAIT_S
        from tests.differential.messages import build

        while True:
            req = build(
                2,
                5,
                {
                    "replica_id": -1,
                    "isolation_level": 1,
                    "topics": [
                        {
                            "name": topic(side, suffix),
                            "partitions": [{"partition_index": partition, "timestamp": -1}],
                        }
                    ],
                },
            )
            got = side.client.call(req, 5).topics[0].partitions[0].offset
            if got >= offset:
                return
            assert time.monotonic() < deadline, f"{side.name}: LSO {got}, want {offset}"
            time.sleep(0.05)

    return action


def pid_of(side: Side, key: str = "pid") -> tuple[int, int]:
    pid, epoch = side.vars[key]
    return int(pid), int(epoch)
