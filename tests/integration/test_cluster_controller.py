"""The controller against a real etcd: three brokers' stores and controllers in
one process (each with its own etcd session and lease), so a broker's death is
its lease expiring. Leaders move on death, come back without unclean election,
and a new controller takes over and handles the next death."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from broker.cluster.controller import ClusterController
from broker.store.address import EtcdAddress
from broker.store.etcd_store import EtcdMetadataStore
from broker.store.image import NO_LEADER, BrokerRegistration, ClusterImage
from protocol.types import NodeId
from tests.integration.etcd import EtcdProcess

LEASE_TTL_S = 2
DEATH_S = LEASE_TTL_S * 4


class Node:
    """What one broker runs of the cluster layer: its store, registration and controller."""

    def __init__(self, url: str, node_id: int) -> None:
        self.node_id = NodeId(node_id)
        self.store = EtcdMetadataStore(EtcdAddress.parse(url), lease_ttl_s=LEASE_TTL_S)
        self.controller = ClusterController(self.store, self.node_id)

    async def start(self) -> Node:
        self.store = EtcdMetadataStore(self.store.address, lease_ttl_s=LEASE_TTL_S)
        self.controller = ClusterController(self.store, self.node_id)
        await self.store.open(attempts=3, interval_s=0.2)
        await self.store.register(
            BrokerRegistration(self.node_id, "127.0.0.1", 9000 + self.node_id, None, uuid.uuid4().hex)
        )
        self.controller.start()
        return self

    async def die(self) -> None:
        """As kill -9: nothing more is written, the lease is left to expire."""
        await self.controller.stop()
        await self.store.close(stop_lease=False)


@pytest.fixture
async def nodes(etcd: EtcdProcess) -> AsyncIterator[dict[int, Node]]:
    url = f"{etcd.url}/test-{uuid.uuid4().hex[:8]}"
    started = {n: await Node(url, n).start() for n in (1, 2, 3)}
    yield started
    for node in started.values():
        await node.die()


def controller_of(nodes: dict[int, Node]) -> Node:
    active = [n for n in nodes.values() if n.controller.active]
    assert len(active) == 1, f"{len(active)} active controllers"
    return active[0]


async def until(node: Node, predicate: object, timeout_s: float = DEATH_S) -> ClusterImage:
    assert await node.store.wait_for(predicate, timeout_s), node.store.image  # type: ignore[arg-type]
    return node.store.image


async def test_one_controller_creates_topics_spread_over_the_brokers(nodes: dict[int, Node]) -> None:
    await until(nodes[1], lambda i: i.controller is not None and len(i.brokers) == 3)
    await until(nodes[1], lambda i: any(n.controller.active for n in nodes.values()), 5)
    controller = controller_of(nodes)
    assert await controller.controller.create_topic("t", 3, 3, {})
    image = await until(nodes[2], lambda i: len(i.partitions_of("t")) == 3)
    assert {s.leader for s in image.partitions_of("t").values()} == {1, 2, 3}
    assert all(s.isr == s.replicas for s in image.partitions_of("t").values())


async def test_leaders_move_on_death_and_the_next_controller_handles_the_next_death(
    nodes: dict[int, Node],
) -> None:
    await until(nodes[1], lambda i: len(i.brokers) == 3)
    await until(nodes[1], lambda i: any(n.controller.active for n in nodes.values()), 5)
    first = controller_of(nodes)
    assert await first.controller.create_topic("t", 6, 3, {})
    await until(nodes[1], lambda i: len(i.partitions_of("t")) == 6)

    await first.die()
    survivors = {k: n for k, n in nodes.items() if n is not first}
    watcher = next(iter(survivors.values()))
    image = await until(watcher, lambda i: len(i.partitions_of("t")) == 6 and all(
        s.leader != first.node_id and first.node_id not in s.isr for s in i.partitions_of("t").values()
    ))
    moved = [s for s in image.partitions_of("t").values() if s.replicas[0] == first.node_id]
    assert moved and all(s.leader_epoch == 1 for s in moved)
    second = controller_of(survivors)
    assert second.controller.record is not None and second.controller.record.epoch == 2

    await second.die()
    last = next(n for n in survivors.values() if n is not second)
    await until(last, lambda i: len(i.partitions_of("t")) == 6 and all(
        s.leader == last.node_id and s.isr == (last.node_id,) for s in i.partitions_of("t").values()
    ))
    assert last.controller.active


async def test_an_offline_partition_waits_for_its_last_isr_member(nodes: dict[int, Node]) -> None:
    await until(nodes[1], lambda i: any(n.controller.active for n in nodes.values()), 5)
    controller = controller_of(nodes)
    others = [n for n in nodes.values() if n is not controller]
    await controller.controller.store.wait_for(lambda i: len(i.brokers) == 3, 5)
    # A single-replica topic on a broker that is not the controller.
    assert await controller.controller.create_topic("solo", 3, 1, {})
    image = await until(controller, lambda i: len(i.partitions_of("solo")) == 3)
    index, state = next(
        (i, s) for i, s in image.partitions_of("solo").items() if s.leader == others[0].node_id
    )
    await others[0].die()
    image = await until(controller, lambda i: i.partitions_of("solo")[index].leader == NO_LEADER)
    assert image.partitions_of("solo")[index].isr == (others[0].node_id,), "no unclean election"
    await others[0].start()
    image = await until(controller, lambda i: i.partitions_of("solo")[index].leader == others[0].node_id)
    assert image.partitions_of("solo")[index].leader_epoch == state.leader_epoch + 2
