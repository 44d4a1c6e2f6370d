"""What Metadata and DescribeCluster say about brokers and partitions, in either mode.

`SingleNodeView` answers for one broker that leads everything it hosts;
`ClusterView` reads the cluster image (live brokers, the controller, each
partition's leader, epoch, replicas and ISR; a replica whose broker is not
registered is offline).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from broker.store.image import NO_LEADER, ClusterImage

Endpoint = tuple[str, str, int]  # listener name, advertised host, port


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A broker as clients see it: `host`/`port` of its inter-broker listener, and every
    advertised listener in `endpoints`."""

    node_id: int
    host: str
    port: int
    rack: str | None
    endpoints: tuple[Endpoint, ...] = ()

    def on(self, listener: str) -> BrokerInfo | None:
        """The broker as a client connected to `listener` must reach it: that listener's
        address; None when the broker does not advertise it (Kafka leaves it out)."""
        if not self.endpoints:
            return self
        for name, host, port in self.endpoints:
            if name == listener:
                return BrokerInfo(self.node_id, host, port, self.rack)
        return None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...]


class EpochLookup(Protocol):
    def __call__(self, topic: str, index: int) -> int: ...


class ImageSource(Protocol):
    def __call__(self) -> ClusterImage: ...


class ChangeLookup(Protocol):
    def __call__(self, topic: str) -> int | None: ...


# What `topic_token` returns: equal tokens of one topic, equal `partition` answers for it
Token = tuple[int, ...]


def on_listener(brokers: list[BrokerInfo], listener: str) -> list[BrokerInfo]:
    """The brokers at the addresses of `listener` (Metadata, DescribeCluster, FindCoordinator
    answer a client with the addresses of the listener it connected to)."""
    return [b for b in (x.on(listener) for x in brokers) if b is not None]


class SingleNodeView:
    """The `Cluster` port of a single broker."""

    def __init__(
        self, me: BrokerInfo, epoch_of: EpochLookup, change_of: ChangeLookup, cluster_id: str
    ) -> None:
        self.me = me
        self._epoch_of = epoch_of
        self._change_of = change_of
        self.node_id = me.node_id
        self.cluster_id = cluster_id

    def brokers(self) -> list[BrokerInfo]:
        return [self.me]

    def brokers_on(self, listener: str) -> list[BrokerInfo]:
        return on_listener(self.brokers(), listener)

    def controller_id(self) -> int:
        return self.me.node_id

    def partition(self, topic: str, index: int) -> PartitionInfo | None:
        nodes = (self.me.node_id,)
        return PartitionInfo(self.me.node_id, self._epoch_of(topic, index), nodes, nodes, ())

    def topic_token(self, topic: str) -> Token | None:
        """A partition's epoch is set when it is created here: the topic's partitions added or
        removed are its only changes."""
        change = self._change_of(topic)
        return None if change is None else (change,)


class ClusterView:
    """The `Cluster` port of a broker in an etcd cluster: the image as it is now."""

    def __init__(self, image: ImageSource, me: BrokerInfo, cluster_id: str) -> None:
        self._image = image
        self._me = me
        self.node_id = me.node_id
        self.cluster_id = cluster_id

    def brokers_on(self, listener: str) -> list[BrokerInfo]:
        """The brokers a client is told of: the registered ones, and this broker while its
        registration lapsed (a lease that expired under load, until it registers again). It
        is answering, and a client told of no broker at all keeps none to ask again (seed
        92: librdkafka dropped every broker it knew and its consumer never fetched again)."""
        told = self.brokers()
        if all(b.node_id != self.node_id for b in told):
            told.append(self._me)
        return on_listener(told, listener)

    def brokers(self) -> list[BrokerInfo]:
        image = self._image()
        return [
            BrokerInfo(r.node_id, r.host, r.port, r.rack, r.endpoints)
            for _, r in sorted(image.brokers.items())
        ]

    def controller_id(self) -> int:
        """The elected controller; while none is, this broker, as a KRaft broker names a live
        broker rather than none: it holds what only the controller does until one is elected
        and forwards it then (ControllerChannel). Told of none, librdkafka's admin client
        waited out its whole request for the next Metadata (a CreateTopics sent in the half
        second after etcd came back hung for 30 s)."""
        controller = self._image().controller
        return controller.node_id if controller is not None else self.node_id

    def partition(self, topic: str, index: int) -> PartitionInfo | None:
        image = self._image()
        state = image.partitions.get((topic, index))
        if state is None:
            return None
        offline = tuple(n for n in state.replicas if n not in image.brokers)
        leader = state.leader if state.leader in image.brokers else NO_LEADER
        return PartitionInfo(leader, state.leader_epoch, state.replicas, state.isr, offline)

    def topic_token(self, topic: str) -> Token | None:
        """A partition's answer reads its state and the registered brokers: the image numbers
        the last change of each."""
        image = self._image()
        change = image.topic_changes.get(topic)
        return None if change is None else (change, image.brokers_change)
