"""A generated action (a plain, JSON-able dict: what to send, never a broker's ids) turned into
the suite's `Step`: ids each broker made up (producer ids and epochs, topic ids, the next
sequence) are read from the side's `vars` when the request is built, and learnt from answers.
So a sequence replays, and shrinks, on fresh topics and transactional ids of either broker."""

from __future__ import annotations

import time
from typing import Any

from tests.differential.runner import Side, Step, Tree
from tests.differential.steps import WAIT_S, topic
from tests.integration.wire import build_batch

Act = dict[str, Any]
# Topics of a sequence, by suffix of its `vars["t"]`: two partitions, one compacted, none such.
TOPICS = {"": 2, "-c": 1}
UNKNOWN = "-none"
PRODUCERS = ("i0", "i1", "x0", "x1")  # i*: idempotent, x*: transactional
GROUPS = ("g0", "g1")
TIMEOUT_MS = 5000
TXN_TIMEOUT_MS = 60000


def base_time(side: Side) -> int:
    """The records' timestamps are this plus 0..50 ms: an hour before the sequence began, the
    same on both brokers (recent enough for retention, old enough for message.timestamp.*)."""
    return int(side.vars["ts0"])


def txn_id(side: Side, producer: str) -> str | None:
    return topic(side, f"-{producer}") if producer.startswith("x") else None


def group_id(side: Side, group: str) -> str:
    return topic(side, f"-{group}")


def pid(side: Side, producer: str, act: Act) -> tuple[int, int]:
    """The producer's id and epoch as this side learnt them, moved by the action's deltas."""
    got, epoch = side.vars.setdefault("pids", {}).get(producer, (-1, -1))
    if got < 0:
        return -1, -1
    return got + act.get("pid_delta", 0), epoch + act.get("epoch_delta", 0)


def _learn_pid(side: Side, producer: str, new_pid: int, epoch: int) -> None:
    side.vars.setdefault("pids", {})[producer] = (new_pid, epoch)


# -- producers ---------------------------------------------------------------------------------


def init(act: Act) -> Step:
    def request(side: Side) -> Tree:
        got, epoch = pid(side, act["producer"], act) if act.get("with_epoch") else (-1, -1)
        return {
            "transactional_id": txn_id(side, act["producer"]),
            "transaction_timeout_ms": act.get("txn_timeout_ms", TXN_TIMEOUT_MS),
            "producer_id": got,
            "producer_epoch": epoch,
        }

    def learn(side: Side, resp: Any) -> None:
        if resp.error_code == 0:
            _learn_pid(side, act["producer"], resp.producer_id, resp.producer_epoch)

    return Step(22, request, version=act["v"], learn=learn)


def _records(side: Side, act: Act) -> bytes:
    n = act.get("n", 1)
    values: list[bytes | None] = [b"v%d" % i for i in range(n)]
    keys: list[bytes | None] = [b"k%d" % i for i in range(n)]
    ts = base_time(side) + act.get("ts", 0)
    producer = act.get("producer")
    if producer is None:
        return build_batch(values, keys=keys, base_timestamp=ts)
    got, epoch = pid(side, producer, act)
    if got < 0:  # no id yet: a plain batch (a transactional one without a producer id is input no
        return build_batch(values, keys=keys, base_timestamp=ts)  # client sends: docs/storage.md)
    return build_batch(
        values,
        keys=keys,
        base_timestamp=ts,
        producer_id=got,
        producer_epoch=epoch,
        base_sequence=_sequence(side, act, epoch),
        transactional=act.get("transactional", False),
    )


def _seq_key(act: Act, epoch: int) -> str:
    return f"{act['producer']}/{epoch}/{act['topic']}/{act['partition']}"


def _sequence(side: Side, act: Act, epoch: int) -> int:
    nxt: int = side.vars.setdefault("seqs", {}).get(_seq_key(act, epoch), 0)
    mode = act.get("seq", "next")
    return {"next": nxt, "dup": max(0, nxt - act.get("n", 1)), "gap": nxt + 3, "zero": 0}[mode]


def produce(act: Act) -> Step:
    def request(side: Side) -> Tree:
        name = topic(side, act["topic"])
        producer = act.get("producer")
        send_id = producer is not None and act.get("send_txn_id", act.get("transactional", False))
        return {
            "transactional_id": txn_id(side, producer) if send_id and producer else None,
            "acks": act.get("acks", -1),
            "timeout_ms": TIMEOUT_MS,
            "topic_data": [
                {
                    "name": name,
                    "topic_id": side.vars.get(f"id{act['topic']}"),
                    "partition_data": [{"index": act["partition"], "records": _records(side, act)}],
                }
            ],
        }

    def learn(side: Side, resp: Any) -> None:
        producer = act.get("producer")
        part = resp.responses[0].partition_responses[0]
        if producer is None or part.error_code != 0:
            return
        got, epoch = pid(side, producer, act)
        key = _seq_key(act, epoch)
        seqs = side.vars.setdefault("seqs", {})
        seqs[key] = max(seqs.get(key, 0), _sequence(side, act, epoch) + act.get("n", 1))

    return Step(0, request, version=act["v"], learn=learn)


# -- transactions ------------------------------------------------------------------------------


def _txn_topics(side: Side, act: Act) -> list[Tree]:
    by_topic: dict[str, list[int]] = {}
    for suffix, partition in act["partitions"]:
        by_topic.setdefault(topic(side, suffix), []).append(partition)
    return [{"name": name, "partitions": parts} for name, parts in by_topic.items()]


def add_partitions(act: Act) -> Step:
    def request(side: Side) -> Tree:
        got, epoch = pid(side, act["producer"], act)
        if act["v"] >= 4:
            return {
                "transactions": [
                    {
                        "transactional_id": txn_id(side, act["producer"]),
                        "producer_id": got,
                        "producer_epoch": epoch,
                        "verify_only": act.get("verify_only", True),
                        "topics": _txn_topics(side, act),
                    }
                ]
            }
        return {
            "v3_and_below_transactional_id": txn_id(side, act["producer"]),
            "v3_and_below_producer_id": got,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": _txn_topics(side, act),
        }

    return Step(24, request, version=act["v"])


def add_offsets(act: Act) -> Step:
    def request(side: Side) -> Tree:
        got, epoch = pid(side, act["producer"], act)
        return {
            "transactional_id": txn_id(side, act["producer"]),
            "producer_id": got,
            "producer_epoch": epoch,
            "group_id": group_id(side, act["group"]),
        }

    return Step(25, request, version=act["v"])


def _offset_topics(side: Side, act: Act, commit_timestamp: bool = False) -> list[Tree]:
    by_topic: dict[str, list[Tree]] = {}
    for suffix, partition, offset in act["offsets"]:
        entry: Tree = {
            "partition_index": partition,
            "committed_offset": offset,
            "committed_leader_epoch": -1,
            "committed_metadata": "m",
        }
        if commit_timestamp:
            entry["commit_timestamp"] = -1
        by_topic.setdefault(topic(side, suffix), []).append(entry)
    return [{"name": name, "partitions": parts} for name, parts in by_topic.items()]


def txn_offset_commit(act: Act) -> Step:
    def request(side: Side) -> Tree:
        got, epoch = pid(side, act["producer"], act)
        return {
            "transactional_id": txn_id(side, act["producer"]),
            "group_id": group_id(side, act["group"]),
            "producer_id": got,
            "producer_epoch": epoch,
            "generation_id": act.get("generation", -1),
            "member_id": "",
            "group_instance_id": None,
            "topics": _offset_topics(side, act),
        }

    return Step(28, request, version=act["v"])


def end_txn(act: Act) -> Step:
    def request(side: Side) -> Tree:
        got, epoch = pid(side, act["producer"], act)
        return {
            "transactional_id": txn_id(side, act["producer"]),
            "producer_id": got,
            "producer_epoch": epoch,
            "committed": act["commit"],
        }

    def learn(side: Side, resp: Any) -> None:  # v5: the epoch EndTxn bumped (transaction version 2)
        if resp.error_code == 0 and getattr(resp, "producer_id", -1) >= 0 and not act.get("epoch_delta"):
            _learn_pid(side, act["producer"], resp.producer_id, resp.producer_epoch)

    return Step(26, request, version=act["v"], learn=learn)


def markers(act: Act) -> Step:
    def request(side: Side) -> Tree:
        got, epoch = pid(side, act["producer"], act)
        return {
            "markers": [
                {
                    "producer_id": got,
                    "producer_epoch": epoch,
                    "transaction_result": act["commit"],
                    "topics": [
                        {"name": t["name"], "partition_indexes": t["partitions"]}
                        for t in _txn_topics(side, act)
                    ],
                    "coordinator_epoch": act.get("coordinator_epoch", 0),
                    "transaction_version": act.get("tv", 1),
                }
            ]
        }

    return Step(27, request, version=act["v"])


# -- reads -------------------------------------------------------------------------------------


def fetch(act: Act) -> Step:
    def request(side: Side) -> Tree:
        return {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "isolation_level": act["isolation"],
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": topic(side, act["topic"]),
                    "topic_id": side.vars.get(f"id{act['topic']}"),
                    "partitions": [
                        {
                            "partition": act["partition"],
                            "fetch_offset": act["offset"],
                            "log_start_offset": -1,
                            "partition_max_bytes": 1 << 20,
                            "current_leader_epoch": -1,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        }

    return Step(1, request, version=act["v"])


def list_offsets(act: Act) -> Step:
    def request(side: Side) -> Tree:
        return {
            "replica_id": -1,
            "isolation_level": act["isolation"],
            "timeout_ms": TIMEOUT_MS,
            "topics": [
                {
                    "name": topic(side, act["topic"]),
                    "partitions": [
                        {
                            "partition_index": act["partition"],
                            "timestamp": act["spec"] if act["spec"] < 0 else base_time(side) + act["spec"],
                            "max_num_offsets": 1,
                            "current_leader_epoch": -1,
                        }
                    ],
                }
            ],
        }

    return Step(2, request, version=act["v"], select=_marker_times)


def _marker_times(side: Side, tree: Tree) -> Tree:
    """A timestamp found later than every record's is a marker's: each broker's own clock."""
    late = base_time(side) + 600_000
    for t in tree["topics"]:
        for p in t["partitions"]:
            if p.get("timestamp", -1) >= late:
                p["timestamp"] = "<marker's time>"
    return tree


def delete_records(act: Act) -> Step:
    def request(side: Side) -> Tree:
        return {
            "topics": [
                {
                    "name": topic(side, act["topic"]),
                    "partitions": [{"partition_index": act["partition"], "offset": act["offset"]}],
                }
            ],
            "timeout_ms": TIMEOUT_MS,
        }

    return Step(21, request, version=act["v"])


def describe_producers(act: Act) -> Step:
    def request(side: Side) -> Tree:
        return {"topics": [{"name": topic(side, act["topic"]), "partition_indexes": act["partitions"]}]}

    return Step(61, request, version=0)


def describe_txns(act: Act) -> Step:
    def request(side: Side) -> Tree:
        return {"transactional_ids": [txn_id(side, p) for p in act["producers"]]}

    return Step(65, request, version=0)


def _ours(side: Side, tree: Tree) -> Tree:
    """ListTransactions lists the whole broker: only this sequence's transactional ids."""
    mine = [t for t in tree["transaction_states"] if t["transactional_id"].startswith(topic(side))]
    return {**tree, "transaction_states": mine}


def list_txns(act: Act) -> Step:
    def request(side: Side) -> Tree:
        return {
            "state_filters": act["states"],
            "producer_id_filters": [pid(side, p, {})[0] for p in act["producers"]],
            "duration_filter": act.get("duration", -1),
            "transactional_id_pattern": None,
        }

    return Step(66, request, version=act["v"], select=_ours)


# -- groups ------------------------------------------------------------------------------------


def offset_commit(act: Act) -> Step:
    def request(side: Side) -> Tree:
        return {
            "group_id": group_id(side, act["group"]),
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "retention_time_ms": -1,
            "topics": _offset_topics(side, act, commit_timestamp=True),
        }

    return Step(8, request, version=act["v"])


def offset_fetch(act: Act) -> Step:
    def request(side: Side) -> Tree:
        by_topic: dict[str, list[int]] = {}
        for suffix, partition in act["partitions"]:
            by_topic.setdefault(topic(side, suffix), []).append(partition)
        topics = [{"name": name, "partition_indexes": parts} for name, parts in by_topic.items()]
        if act["v"] >= 8:
            group = {"group_id": group_id(side, act["group"]), "member_id": None, "member_epoch": -1}
            return {"groups": [{**group, "topics": topics}], "require_stable": act["stable"]}
        return {"group_id": group_id(side, act["group"]), "topics": topics, "require_stable": act["stable"]}

    return Step(9, request, version=act["v"])


# -- configs -----------------------------------------------------------------------------------

TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4


def _resource(side: Side, act: Act) -> tuple[int, str]:
    if act["resource"] == "broker":
        return BROKER_RESOURCE, act.get("broker", "1")
    return TOPIC_RESOURCE, topic(side, act["topic"])


def alter_configs(act: Act) -> Step:
    def request(side: Side) -> Tree:
        kind, name = _resource(side, act)
        configs = [{"name": k, "value": v} for k, v in act["configs"]]
        return {
            "resources": [{"resource_type": kind, "resource_name": name, "configs": configs}],
            "validate_only": act["validate_only"],
        }

    return Step(33, request, version=act["v"])


def incremental_alter(act: Act) -> Step:
    def request(side: Side) -> Tree:
        kind, name = _resource(side, act)
        configs = [{"name": k, "config_operation": op, "value": v} for k, op, v in act["configs"]]
        return {
            "resources": [{"resource_type": kind, "resource_name": name, "configs": configs}],
            "validate_only": act["validate_only"],
        }

    return Step(44, request, version=act["v"])


def describe_configs(act: Act) -> Step:
    def request(side: Side) -> Tree:
        kind, name = _resource(side, act)
        return {
            "resources": [{"resource_type": kind, "resource_name": name, "configuration_keys": act["keys"]}],
            "include_synonyms": False,
            "include_documentation": False,
        }

    return Step(32, request, version=act["v"])


# -- waits -------------------------------------------------------------------------------------

SETTLING = ("PrepareCommit", "PrepareAbort", "PrepareEpochFence")


def settle(side: Side, wait_s: float = WAIT_S) -> list[str]:
    """Until no transaction of the sequence is between EndTxn and its markers (both brokers
    finish a transaction in the background; the next step must not race it): [] then, or the
    states still settling after `wait_s` (a broker whose markers are refused stays there)."""
    from tests.differential.messages import build

    ids = [txn_id(side, p) for p in PRODUCERS if p.startswith("x")]
    deadline = time.monotonic() + wait_s
    while True:
        resp = side.client.call(build(65, 0, {"transactional_ids": ids}), 0)
        states = [t.transaction_state for t in resp.transaction_states]
        if not any(s in SETTLING for s in states):
            return []
        if time.monotonic() > deadline:
            return sorted(s for s in states if s in SETTLING)
        time.sleep(0.02)


def pause_after(act: Act) -> float:
    """Seconds to let pass after the action: Kafka applies a topic's new configs to its log a
    moment after AlterConfigs answers (through its metadata log), Gregor before it answers."""
    changes = act["op"] in ("alter_configs", "incremental_alter") and not act["validate_only"]
    return 0.3 if changes and act["resource"] == "topic" else 0.0


BUILDERS = {
    "init": init,
    "produce": produce,
    "add_partitions": add_partitions,
    "add_offsets": add_offsets,
    "txn_offset_commit": txn_offset_commit,
    "end_txn": end_txn,
    "markers": markers,
    "fetch": fetch,
    "list_offsets": list_offsets,
    "delete_records": delete_records,
    "describe_producers": describe_producers,
    "describe_txns": describe_txns,
    "list_txns": list_txns,
    "offset_commit": offset_commit,
    "offset_fetch": offset_fetch,
    "alter_configs": alter_configs,
    "incremental_alter": incremental_alter,
    "describe_configs": describe_configs,
}


def to_step(act: Act) -> Step:
    return BUILDERS[act["op"]](act)

