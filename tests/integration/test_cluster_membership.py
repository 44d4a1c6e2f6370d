"""Brokers on etcd, as real processes: registration under a lease, one controller
re-elected after kill -9, a live node id or another cluster's data dir refused,
an unreachable etcd reported after a bound, and an etcd restart survived."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from broker.cluster.address import EtcdAddress
from broker.cluster.etcd_store import EtcdMetadataStore
from broker.cluster.image import ClusterImage
from tests.integration.etcd import EtcdProcess
from tests.integration.harness import BrokerFactory, BrokerProcess, BrokerStartError, free_port

SESSION_MS = 2000
DEATH_S = 10.0


@pytest.fixture
def store_url(etcd: EtcdProcess) -> str:
    return f"{etcd.url}/test-{uuid.uuid4().hex[:8]}"


def cluster_overrides(url: str, **more: Any) -> dict[str, Any]:
    return {"metadata.store": url, "broker.session.timeout.ms": SESSION_MS, **more}


@pytest.fixture
async def observer(store_url: str) -> AsyncIterator[EtcdMetadataStore]:
    """A read-only view of the cluster's metadata, as the brokers see it."""
    store = EtcdMetadataStore(EtcdAddress.parse(store_url))
    await store.open(attempts=3, interval_s=0.2)
    yield store
    await store.close()


async def until(store: EtcdMetadataStore, predicate: Any, timeout_s: float = DEATH_S) -> ClusterImage:
    assert await store.wait_for(predicate, timeout_s), store.image
    return store.image


def three_brokers(factory: BrokerFactory, url: str) -> list[BrokerProcess]:
    return [factory(cluster_overrides(url), node_id=n) for n in (1, 2, 3)]


async def test_brokers_register_and_a_killed_controller_is_replaced(
    broker_factory: BrokerFactory, store_url: str, observer: EtcdMetadataStore
) -> None:
    brokers = three_brokers(broker_factory, store_url)
    image = await until(observer, lambda i: set(i.brokers) == {1, 2, 3} and i.controller is not None)
    assert image.brokers[2].port == brokers[1].port
    first = image.controller
    assert first is not None
    brokers[first.node_id - 1].kill9()
    image = await until(observer, lambda i: i.controller is not None and i.controller != first
                        and first.node_id not in i.brokers)
    assert image.controller is not None and image.controller.epoch == first.epoch + 1
    second = image.controller
    brokers[second.node_id - 1].kill9()
    image = await until(
        observer, lambda i: i.controller is not None and i.controller.epoch == first.epoch + 2
    )
    assert set(image.brokers) == {1, 2, 3} - {first.node_id, second.node_id}


async def test_a_clean_stop_deregisters_at_once(
    broker_factory: BrokerFactory, store_url: str, observer: EtcdMetadataStore
) -> None:
    broker = broker_factory(cluster_overrides(store_url, **{"broker.session.timeout.ms": 60000}))
    await until(observer, lambda i: set(i.brokers) == {1})
    assert broker.stop() == 0
    await until(observer, lambda i: not i.brokers, 3)


def failed_start(factory: BrokerFactory, overrides: dict[str, Any], **kw: Any) -> str:
    broker = factory(overrides, start=False, **kw)
    with pytest.raises(BrokerStartError) as failure:
        broker.start(timeout=30)
    log = broker.log_path.read_text()
    assert "Traceback" not in log, log
    return str(failure.value)


async def test_a_live_node_id_is_refused(
    broker_factory: BrokerFactory, store_url: str, observer: EtcdMetadataStore
) -> None:
    broker_factory(cluster_overrides(store_url))
    await until(observer, lambda i: set(i.brokers) == {1})
    message = failed_start(broker_factory, cluster_overrides(store_url))
    assert "cannot join the cluster: node id 1 is registered by a live broker" in message


async def test_a_data_dir_of_another_cluster_is_refused(
    broker_factory: BrokerFactory, store_url: str, tmp_path: Path
) -> None:
    local = broker_factory({"cluster.id": "ZZZZZZZZZZZZZZZZZZZZZZ"})
    local.stop()
    clustered = broker_factory(cluster_overrides(store_url), start=False)
    clustered.data_dir = local.data_dir
    clustered.config["log.dirs"] = str(local.data_dir)
    with pytest.raises(BrokerStartError, match="belongs to another broker: cluster.id mismatch"):
        clustered.start(timeout=30)


async def test_an_unreachable_etcd_stops_start_up_after_the_bound(broker_factory: BrokerFactory) -> None:
    url = f"etcd://127.0.0.1:{free_port()}"
    message = failed_start(broker_factory, {"metadata.store": url, "metadata.store.connect.attempts": 2})
    assert "cannot join the cluster: metadata store" in message and "unreachable after 2 attempts" in message
    assert "(attempt 1 of 2)" in message


async def test_brokers_stay_registered_across_an_etcd_restart(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    server = EtcdProcess(tmp_path / "etcd").start()
    try:
        url = f"{server.url}/restart"
        three_brokers(broker_factory, url)
        store = EtcdMetadataStore(EtcdAddress.parse(url))
        await store.open(attempts=3, interval_s=0.2)
        try:
            await until(store, lambda i: set(i.brokers) == {1, 2, 3} and i.controller is not None)
            server.restart()
            await asyncio.sleep(SESSION_MS / 1000 * 2)  # longer than a lease: keep-alive must go on
            await until(store, lambda i: set(i.brokers) == {1, 2, 3} and i.controller is not None)
        finally:
            await store.close()
    finally:
        server.close()
