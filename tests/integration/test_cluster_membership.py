"""Brokers on etcd, as real processes: registration under a lease, one controller
re-elected after kill -9, a live node id or another cluster's data dir refused,
a broker restarted at once after kill -9 taking over its own registration, a
campaign whose lease ended meanwhile leaving no controller record behind, a broker
registered again campaigning again, a campaign won whose answer was lost taken up, a
topic asked for while no controller is elected, an unreachable etcd reported after a
bound, a registration retried while etcd is paused, an etcd restart survived, and a
broker whose registration lapsed still telling clients of itself."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from broker.store.address import EtcdAddress
from broker.store.etcd_store import EtcdMetadataStore
from broker.store.image import ClusterImage
from protocol.messages import REQUESTS
from tests.integration.clients import assign_consumer, poll_records
from tests.integration.etcd import EtcdProcess
from tests.integration.harness import BrokerFactory, BrokerProcess, BrokerStartError, free_port, wait_until
from tests.integration.spark_support import create_topic
from tests.integration.wire import WireClient

SESSION_MS = 2000
FIND_COORDINATOR, DESCRIBE_CLUSTER = 10, 60
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


async def test_a_lease_lost_during_a_campaign_leaves_no_controller_record_behind(
    broker_factory: BrokerFactory, store_url: str, observer: EtcdMetadataStore
) -> None:
    """The controller record lives under its broker's lease. A campaign whose lease ended
    while it ran (here: revoked while the campaign waits at a slow point, the broker slow to
    register again) must not write the record without one: such a record outlives its
    broker, and no broker campaigns again (chaos seed 95 ran 90 minutes without a
    controller, four partitions leaderless). Then broker 1 dies and broker 2 takes over."""
    first = broker_factory(cluster_overrides(store_url), start=False, node_id=1)
    first.env["GREGOR_CRASH_POINTS"] = "controller-campaign@3,etcd-register-again@5"
    first.start()
    wait_until(lambda: "slow point controller-campaign reached" in first.log_text(), 10)
    registered = await observer.client.get(f"{observer.address.root}/brokers/1".encode())
    await observer.client.revoke_lease(registered.lease)
    await logged(first, "slow point etcd-register-again reached", 5)
    await logged(first, "controller step refused, its lease ended", 5)  # etcd's refusal, as meant
    await until(observer, lambda i: i.controller is not None and 1 in i.brokers, 30)
    assert "controller step failed" not in first.log_text()
    assert await observer.controller_held()
    second = broker_factory(cluster_overrides(store_url), node_id=2)
    await until(observer, lambda i: 2 in i.brokers)
    first.kill9()
    await until(observer, lambda i: i.controller is not None and i.controller.node_id == 2)
    wait_until(lambda: "is now the controller" in second.log_text(), 5)  # logged just after the record


async def test_a_broker_alone_campaigns_again_once_registered_again(
    broker_factory: BrokerFactory, store_url: str, observer: EtcdMetadataStore
) -> None:
    """Its lease revoked, a lone broker loses its registration and the controller record
    with it. It registers again and must campaign again, although its registration's watch
    event arrives before it knows its new lease (a slow point holds the gap open): the store
    tells the controller once the lease is known (without that, the event found no lease and
    nothing woke the controller again, seen once in five runs of the test above). The observer
    must see the revoke's deletes, and the log is waited for off the event loop: a wait on it
    kept the observer's watch from running, and its stale image passed the record from before
    the revoke for the new one (CI of 847a031)."""
    broker = broker_factory(cluster_overrides(store_url), start=False, node_id=1)
    broker.env["GREGOR_CRASH_POINTS"] = "etcd-registered@1"
    broker.start()
    await until(observer, lambda i: i.controller is not None and i.controller.node_id == 1)
    registered = await observer.client.get(f"{observer.address.root}/brokers/1".encode())
    await observer.client.revoke_lease(registered.lease)
    await until(observer, lambda i: i.controller is None)  # the revoke's deletes seen, not a stale image
    await asyncio.to_thread(
        wait_until, lambda: broker.log_text().count("slow point etcd-registered reached") == 2, DEATH_S
    )
    await until(observer, lambda i: i.controller is not None and 1 in i.brokers)
    assert await observer.controller_held()


async def test_a_campaign_won_whose_answer_was_lost_is_taken_up(
    broker_factory: BrokerFactory, store_url: str, observer: EtcdMetadataStore
) -> None:
    """etcd applied the campaign and its answer was lost (a lost-answer point drops it, as a
    connection reset after the write would): the record names the broker, under its lease,
    and the broker did not know it had won. It takes the record up, as Kafka's ZooKeeper
    controller recognised its own /controller node after a retried create. Before, it never
    acted as controller, and no broker campaigned while its lease lived: a topic asked for
    was never created."""
    broker = broker_factory(cluster_overrides(store_url), start=False, node_id=1)
    broker.env["GREGOR_FAIL_POINTS"] = "controller-campaign-answer"
    broker.start()
    await logged(broker, "lost-answer point controller-campaign-answer reached", 10)
    await logged(broker, "broker 1 is the controller (epoch 1): its campaign won, its answer was lost", 10)
    assert await observer.controller_held()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = f"t-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 1, 1)], request_timeout=15)[topic].result(timeout=30)
    image = await until(observer, lambda i: topic in i.topics and (topic, 0) in i.partitions)
    assert image.partitions[(topic, 0)].leader == 1 and image.controller is not None
    assert image.controller.epoch == 1


async def test_a_topic_asked_for_while_no_controller_is_elected_is_created_once_one_is(
    broker_factory: BrokerFactory, store_url: str, observer: EtcdMetadataStore
) -> None:
    """While no controller is elected a broker names itself in Metadata (as a KRaft broker
    names a live broker; told of none, librdkafka's admin client waited out its whole request
    for its next Metadata) and holds what it must forward until one is (answered at once,
    NOT_CONTROLLER reached the application). Here the campaign waits at a slow point while
    CreateTopics is asked (CI of b639934: a topic asked for just after etcd came back)."""
    broker = broker_factory(cluster_overrides(store_url), start=False, node_id=1)
    broker.env["GREGOR_CRASH_POINTS"] = "controller-campaign@3"
    broker.start()
    assert observer.image.controller is None
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = f"t-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 1, 1)], request_timeout=15)[topic].result(timeout=30)
    assert (await until(observer, lambda i: topic in i.topics)).controller is not None


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


async def test_a_broker_restarted_at_once_after_kill9_takes_over_its_registration(
    broker_factory: BrokerFactory, store_url: str, observer: EtcdMetadataStore
) -> None:
    """A supervisor restarts the broker at once: its dead incarnation's lease would last a
    minute, but the new process holds the same data dir and ends that session itself."""
    broker = broker_factory(cluster_overrides(store_url, **{"broker.session.timeout.ms": 60000}))
    first = (await until(observer, lambda i: set(i.brokers) == {1})).brokers[1]
    broker.kill9()
    broker.start()
    image = await until(observer, lambda i: 1 in i.brokers and i.brokers[1].incarnation != first.incarnation)
    assert image.brokers[1].data_dir_id == first.data_dir_id != ""
    log = broker.log_text()
    assert "ended the session of its previous incarnation" in log and "Traceback" not in log


async def test_another_data_dir_is_refused_while_a_killed_brokers_session_lasts(
    broker_factory: BrokerFactory, store_url: str, observer: EtcdMetadataStore
) -> None:
    broker = broker_factory(cluster_overrides(store_url, **{"broker.session.timeout.ms": 60000}))
    await until(observer, lambda i: set(i.brokers) == {1})
    broker.kill9()
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


async def logged(broker: BrokerProcess, text: str, within_s: float = 30) -> None:
    """Until `text` is in the broker's log; the event loop goes on meanwhile."""
    await asyncio.to_thread(wait_until, lambda: text in broker.log_text(), within_s)


async def test_a_broker_starting_while_etcd_is_paused_registers_once_it_answers(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    """etcd paused after the broker joined and before it registered (a slow point holds that
    moment; a chaos campaign's broker restarted into a partition from etcd): its registration
    calls time out and are retried, a line each, until etcd answers; it used to exit with a
    traceback. Paused again before its first producer-id blocks are reserved: it serves and
    reserves them once etcd answers (a transactional producer gets its id)."""
    server = EtcdProcess(tmp_path / "etcd").start()
    try:
        broker = broker_factory(cluster_overrides(f"{server.url}/paused"), start=False, node_id=1)
        broker.env["GREGOR_CRASH_POINTS"] = "broker-register@2,producer-ids-start@2"
        starting = asyncio.create_task(asyncio.to_thread(broker.start, 90))
        await logged(broker, "slow point broker-register reached")
        server.pause()
        await logged(broker, "broker 1 registering: etcd")
        server.resume()
        await logged(broker, "slow point producer-ids-start reached")
        server.pause()
        await logged(broker, "reserving producer ids in etcd failed")
        server.resume()
        await starting
        store = EtcdMetadataStore(EtcdAddress.parse(f"{server.url}/paused"))
        await store.open(attempts=3, interval_s=0.2)
        try:
            await until(store, lambda i: 1 in i.brokers and i.controller is not None)
        finally:
            await store.close()
        assert "Traceback" not in broker.log_text()
        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "after-the-pause"})
        producer.init_transactions(30)  # a producer id from the block reserved while serving
    finally:
        server.close()


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


async def test_each_listener_tells_its_own_addresses(
    broker_factory: BrokerFactory, store_url: str, observer: EtcdMetadataStore
) -> None:
    """Two listeners per broker, as Kafka's container images have: INTERNAL (other brokers,
    other containers) and HOST (advertised under another name). A client gets the brokers'
    addresses of the listener it connected to, in Metadata, DescribeCluster and
    FindCoordinator; the brokers replicate over the inter-broker listener."""
    host_ports = {1: free_port(), 2: free_port()}
    brokers = []
    for node, host in host_ports.items():
        internal = free_port()
        brokers.append(broker_factory(cluster_overrides(store_url, **{
            "listeners": f"INTERNAL://127.0.0.1:{internal},HOST://127.0.0.1:{host}",
            "advertised.listeners": f"INTERNAL://127.0.0.1:{internal},HOST://localhost:{host}",
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,HOST:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
            "default.replication.factor": 2,
        }), node_id=node, port=internal))
    image = await until(observer, lambda i: set(i.brokers) == {1, 2})
    assert image.brokers[2].port == brokers[1].port  # other brokers connect to INTERNAL
    views = {
        brokers[0].port: {(b.node_id, "127.0.0.1", b.port) for b in brokers},
        host_ports[1]: {(node, "localhost", port) for node, port in host_ports.items()},
    }
    for port, expected in views.items():
        with WireClient(port) as c:
            assert {(b.node_id, b.host, b.port) for b in c.metadata(None, version=9).brokers} == expected
            described = c.call(REQUESTS[DESCRIBE_CLUSTER](include_cluster_authorized_operations=False), 0)
            assert {(b.broker_id, b.host, b.port) for b in described.brokers} == expected
            ask = REQUESTS[FIND_COORDINATOR](key_type=0, coordinator_keys=["g"])
            found = wait_until(
                lambda c=c, ask=ask: (f := c.call(ask, 4).coordinators[0]).error_code == 0 and f,
                msg="coordinator",
            )
            assert (found.node_id, found.host, found.port) in expected
    # replicated over INTERNAL: a topic of replication factor 2 gets an ISR of both
    topic = f"two-listeners-{uuid.uuid4().hex[:6]}"
    with WireClient(host_ports[1]) as c:
        assert c.metadata([topic], version=4, auto_create=True).topics[0].error_code in (0, 5)
    await until(observer, lambda i: any(t == topic and len(s.isr) == 2 for (t, _), s in i.partitions.items()))


async def test_a_broker_whose_registration_lapsed_still_tells_clients_of_itself(
    broker_factory: BrokerFactory, store_url: str, observer: EtcdMetadataStore
) -> None:
    """A lease can expire before its keep-alive (a starved broker; seed 92 had all three at
    once): until the broker registers again the image holds no broker, and its partitions no
    leader. Metadata still lists the broker that answers: librdkafka drops every broker a
    Metadata answer leaves out, and with none left its consumer never asked again (seed 92's
    read_committed reader, for 100 minutes). A consumer reading across the lapse reads what
    is written after it."""
    from confluent_kafka import Producer, TopicPartition

    broker = broker_factory(cluster_overrides(store_url, **{"broker.session.timeout.ms": 6000}))
    await until(observer, lambda i: set(i.brokers) == {1})
    topic = f"lapse-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    consumer = assign_consumer(broker.bootstrap, **{"topic.metadata.refresh.interval.ms": 100})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        produce(producer, topic, b"before")
        assert [m for _, m in poll_records(consumer, 1)][0].value == b"before"
        registered = await observer.client.get(f"{observer.address.root}/brokers/1".encode())
        await observer.client.revoke_lease(registered.lease)
        answers = await metadata_until_registered_again(broker.port, topic, observer)
        assert any(leader == -1 for _, leader in answers), "no answer fell in the lapse"
        assert all(1 in told for told, _ in answers), answers
        produce(producer, topic, b"after")
        assert [m for _, m in poll_records(consumer, 1)][0].value == b"after"
    finally:
        consumer.close()
    assert "registration lease expired; registering again" in broker.log_text()


async def metadata_until_registered_again(
    port: int, topic: str, observer: EtcdMetadataStore
) -> list[tuple[set[int], int]]:
    """(brokers told, the partition's leader) of Metadata asked every 20 ms from the lease's
    end until the broker is registered again."""
    answers = []
    lapsed = False
    with WireClient(port) as c:
        for _ in range(1000):
            answer = c.metadata([topic], version=9)
            leader = answer.topics[0].partitions[0].leader_id
            answers.append(({b.node_id for b in answer.brokers}, leader))
            lapsed = lapsed or leader == -1
            if lapsed and 1 in observer.image.brokers and leader == 1:
                return answers
            await asyncio.sleep(0.02)
    raise AssertionError(f"not registered again: {answers[-5:]}")


def produce(producer: Any, topic: str, value: bytes) -> None:
    producer.produce(topic, value, partition=0)
    assert producer.flush(30) == 0
