"""The cluster metadata image: brokers, the controller, topics and partition state.

Pure values, no I/O. A metadata store keeps one image current (the etcd store
from its watch, the local store from its file) and the rest of the broker reads
it synchronously. Every record is JSON under a key of the store's layout:

    <root>/cluster_id                      the cluster id (created once)
    <root>/brokers/<node id>               BrokerRegistration (held by the broker's lease)
    <root>/controller                      ControllerRecord (held by the controller's lease)
    <root>/controller_epoch                the last controller epoch handed out
    <root>/topics/<name>                   TopicRecord (id, replica assignment, configs)
    <root>/partitions/<name>/<index>       PartitionState (leader, epochs, ISR)
    <root>/producer_ids                    the next producer-id block's first id
    <root>/acls/<digest>                   one ACL (AclBinding.to_json(); the digest of its identity)
    <root>/scram/<mechanism>/<user>        one SCRAM credential (salt, stored key, server key, iterations)
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, NewType, Protocol, TypeVar

from protocol.types import LeaderEpoch, NodeId, TopicPartition

PartitionEpoch = NewType("PartitionEpoch", int)

NO_LEADER = NodeId(-1)
# Numbers for changes, never repeated, across images too: a number read from an image that
# was since replaced never matches one of its successor's
_CHANGES = itertools.count(1)


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A live broker: what clients and other brokers need to reach it."""

    node_id: NodeId
    host: str
    port: int
    rack: str | None = None
    incarnation: str = ""  # new for every process start, as Kafka's incarnation id
    # Every advertised listener: (name, host, port); host/port above are the inter-broker one.
    endpoints: tuple[tuple[str, str, int], ...] = ()
    # The data dir's identity (meta.properties directory.id): a restart of the same broker
    # carries the same one, so it may end its dead incarnation's session at once.
    data_dir_id: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id, "host": self.host, "port": self.port,
            "rack": self.rack, "incarnation": self.incarnation,
            "endpoints": [list(e) for e in self.endpoints], "data_dir_id": self.data_dir_id,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BrokerRegistration:
        return cls(
            NodeId(int(data["node_id"])), str(data["host"]), int(data["port"]),
            data.get("rack"), str(data.get("incarnation", "")),
            tuple((str(n), str(h), int(p)) for n, h, p in data.get("endpoints", [])),
            str(data.get("data_dir_id", "")),
        )


@dataclass(frozen=True, slots=True)
class ControllerRecord:
    node_id: NodeId
    epoch: int

    def to_json(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "epoch": self.epoch}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ControllerRecord:
        return cls(NodeId(int(data["node_id"])), int(data["epoch"]))


@dataclass(frozen=True, slots=True)
class TopicRecord:
    """A topic: its id, the replicas of every partition, its config overrides."""

    name: str
    topic_id: uuid.UUID
    assignment: tuple[tuple[NodeId, ...], ...]
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def partitions(self) -> int:
        return len(self.assignment)

    @property
    def replication_factor(self) -> int:
        return len(self.assignment[0]) if self.assignment else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "topic_id": str(self.topic_id),
            "assignment": [list(replicas) for replicas in self.assignment],
            "configs": self.configs,
        }

    @classmethod
    def from_json(cls, name: str, data: dict[str, Any]) -> TopicRecord:
        return cls(
            name, uuid.UUID(data["topic_id"]),
            tuple(tuple(NodeId(int(n)) for n in replicas) for replicas in data["assignment"]),
            dict(data.get("configs", {})),
        )


@dataclass(frozen=True, slots=True)
class PartitionState:
    """Kafka's PartitionRegistration: changed only by compare-and-swap on `partition_epoch`.

    `leader_epoch` moves with every leader change; `partition_epoch` with every
    change at all (leader or ISR), so a leader's ISR update made against an old
    state is refused (AlterPartition's INVALID_UPDATE_VERSION).
    """

    replicas: tuple[NodeId, ...]
    isr: tuple[NodeId, ...]
    leader: NodeId
    leader_epoch: LeaderEpoch
    partition_epoch: PartitionEpoch
    # A reassignment in progress: replicas joining (catching up) and leaving once it completes.
    adding: tuple[NodeId, ...] = ()
    removing: tuple[NodeId, ...] = ()

    def __post_init__(self) -> None:
        if not set(self.isr) <= set(self.replicas):
            raise ValueError(f"ISR {self.isr} is not within replicas {self.replicas}")
        if self.leader != NO_LEADER and self.leader not in self.isr:
            raise ValueError(f"leader {self.leader} is not in ISR {self.isr}")
        adding, removing = set(self.adding), set(self.removing)
        if not adding | removing <= set(self.replicas) or adding & removing:
            raise ValueError(f"adding {self.adding} and removing {self.removing} are not disjoint "
                             f"parts of replicas {self.replicas}")

    @property
    def reassigning(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def target(self) -> tuple[NodeId, ...]:
        """The replicas once a reassignment in progress completes (the replicas otherwise)."""
        return tuple(n for n in self.replicas if n not in self.removing)

    @classmethod
    def initial(cls, replicas: tuple[NodeId, ...], live: set[NodeId]) -> PartitionState:
        isr = tuple(n for n in replicas if n in live)
        leader = isr[0] if isr else NO_LEADER
        return cls(replicas, isr, leader, LeaderEpoch(0), PartitionEpoch(0))

    def with_leader(self, leader: NodeId, isr: tuple[NodeId, ...]) -> PartitionState:
        """A leader change (or loss): the leader epoch and partition epoch move."""
        return replace(
            self, leader=leader, isr=isr, leader_epoch=LeaderEpoch(self.leader_epoch + 1),
            partition_epoch=PartitionEpoch(self.partition_epoch + 1),
        )

    def with_isr(self, isr: tuple[NodeId, ...]) -> PartitionState:
        """An ISR change by the leader: only the partition epoch moves."""
        return replace(self, isr=isr, partition_epoch=PartitionEpoch(self.partition_epoch + 1))

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "replicas": list(self.replicas), "isr": list(self.isr), "leader": self.leader,
            "leader_epoch": self.leader_epoch, "partition_epoch": self.partition_epoch,
        }
        if self.reassigning:  # absent otherwise: states written before reassignments read the same
            data.update(adding=list(self.adding), removing=list(self.removing))
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PartitionState:
        return cls(
            _nodes(data["replicas"]), _nodes(data["isr"]),
            NodeId(int(data["leader"])), LeaderEpoch(int(data["leader_epoch"])),
            PartitionEpoch(int(data["partition_epoch"])),
            _nodes(data.get("adding", ())), _nodes(data.get("removing", ())),
        )


_K = TypeVar("_K")
_V = TypeVar("_V")


class JsonRecord(Protocol):
    def to_json(self) -> dict[str, Any]: ...


def _nodes(ids: Iterable[int | str]) -> tuple[NodeId, ...]:
    return tuple(NodeId(int(n)) for n in ids)


def encode(record: JsonRecord) -> bytes:
    return json.dumps(record.to_json(), sort_keys=True).encode()


@dataclass
class ClusterImage:
    """The current metadata, rebuilt from (key, value) records of the store."""

    cluster_id: str | None = None
    brokers: dict[NodeId, BrokerRegistration] = field(default_factory=dict)
    controller: ControllerRecord | None = None
    topics: dict[str, TopicRecord] = field(default_factory=dict)
    partitions: dict[TopicPartition, PartitionState] = field(default_factory=dict)
    acls: dict[str, list[Any]] = field(default_factory=dict)  # digest -> AclBinding.to_json()
    scram: dict[str, list[Any]] = field(default_factory=dict)  # "<mechanism>/<user>" -> credential
    # The number of each topic's last change (its record or a partition's state), and of the
    # brokers' last: what a reader caching an answer per topic compares (Metadata)
    topic_changes: dict[str, int] = field(default_factory=dict)
    brokers_change: int = field(default_factory=lambda: next(_CHANGES))

    def apply(self, key: str, value: bytes | None) -> None:
        """One record (None = deleted), its key relative to the store's root."""
        parts = key.split("/")
        data = json.loads(value) if value is not None and parts[0] != "cluster_id" else None
        kind = parts[0]
        if kind == "cluster_id":
            self.cluster_id = value.decode() if value is not None else None
        elif kind == "brokers" and len(parts) == 2:
            self._put(self.brokers, NodeId(int(parts[1])), data, BrokerRegistration.from_json)
            self.brokers_change = next(_CHANGES)
        elif kind == "controller":
            self.controller = ControllerRecord.from_json(data) if data is not None else None
        elif kind == "topics" and len(parts) == 2:
            self._put(self.topics, parts[1], data, lambda d: TopicRecord.from_json(parts[1], d))
            self.topic_changes[parts[1]] = next(_CHANGES)
        elif kind == "partitions" and len(parts) == 3:
            self._put(self.partitions, (parts[1], int(parts[2])), data, PartitionState.from_json)
            self.topic_changes[parts[1]] = next(_CHANGES)
        elif kind == "acls" and len(parts) == 2:
            self._put(self.acls, parts[1], data, list)
        elif kind == "scram" and len(parts) >= 3:
            self._put(self.scram, "/".join(parts[1:]), data, list)

    @staticmethod
    def _put(table: dict[_K, _V], key: _K, data: Any, decode: Callable[[Any], _V]) -> None:
        """`data`: the record's decoded JSON (Any: its shape is the table's), None = deleted."""
        if data is None:
            table.pop(key, None)
        else:
            table[key] = decode(data)

    def live_brokers(self) -> set[NodeId]:
        return set(self.brokers)

    def partitions_of(self, topic: str) -> dict[int, PartitionState]:
        return {i: s for (t, i), s in self.partitions.items() if t == topic}
