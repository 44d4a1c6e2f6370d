"""The cluster metadata store on etcd (the only module that talks to etcd).

It keeps a `ClusterImage` current from one prefix watch (re-created from the
last seen revision after a disconnect, reloaded whole after a compaction),
holds this broker's registration under a lease it keeps alive itself (aetcd
has no keep-alive loop), and makes every change as an etcd transaction that
compares before it writes: a topic is created only if absent, a partition
state only replaces the state it was computed from (AlterPartition's
partition-epoch check), a producer-id block only moves the pointer it read.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aetcd
import aetcd.exceptions

from broker.base.faults import lost_answer_point, slow_point
from broker.store.address import EtcdAddress
from broker.store.image import (
    BrokerRegistration,
    ClusterImage,
    ControllerRecord,
    PartitionState,
    TopicRecord,
    encode,
)
from coordinator.producer_ids import ProducerIdBlock
from protocol.types import NodeId

log = logging.getLogger(__name__)
_T = TypeVar("_T")

Listener = Callable[[str], None]
# etcd refuses a transaction of more than --max-txn-ops operations (128 unless its operator
# raised it): a topic's partition states are written in transactions of at most this many.
TXN_PUTS = 100
REGISTERED = "registered"  # told to listeners once this broker's registration and its lease are known here


class StoreUnavailable(Exception):
    """etcd could not be reached within the start-up bound."""


class NodeIdInUse(Exception):
    """Another live broker is registered with this node id."""


class EtcdMetadataStore:
    def __init__(self, address: EtcdAddress, lease_ttl_s: int = 10, request_timeout_s: int = 5) -> None:
        self.address = address
        self.image = ClusterImage()
        self._ttl = lease_ttl_s
        self._timeout = request_timeout_s
        self._client: aetcd.Client | None = None
        self._endpoint = 0
        self._revision = 0
        self._listeners: list[Listener] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._registration: BrokerRegistration | None = None
        self._lease_id: int | None = None
        self._lease_deadline = 0.0
        self._closed = False

    # -- connection ---------------------------------------------------------

    def _key(self, relative: str) -> bytes:
        return f"{self.address.root}/{relative}".encode()

    @property
    def client(self) -> aetcd.Client:
        assert self._client is not None, "store not open"
        return self._client

    async def open(self, attempts: int = 10, interval_s: float = 1.0) -> None:
        """Connect and load the image, retrying with a log line per failed attempt."""
        await self.retrying("connecting", self._connect_and_load, attempts, interval_s)
        self._tasks.append(asyncio.create_task(self._watch_forever()))

    async def _connect_and_load(self) -> None:
        await self._connect()
        await self._load()

    async def retrying(
        self, what: str, action: Callable[[], Awaitable[_T]], attempts: int, interval_s: float = 1.0,
    ) -> _T:
        """`action`'s result once etcd answers it: each failed attempt logs a line and moves to
        the next endpoint; after `attempts` of them, StoreUnavailable."""
        for attempt in range(1, attempts + 1):
            try:
                return await action()
            except aetcd.exceptions.ClientError as e:
                host, port = self.address.endpoints[self._endpoint]
                log.warning("%s: etcd %s:%d did not answer (attempt %d of %d): %s",
                            what, host, port, attempt, attempts, type(e).__name__)
                await self._rotate_endpoint()
                if attempt < attempts:
                    await asyncio.sleep(interval_s)
        where = ",".join(f"{h}:{p}" for h, p in self.address.endpoints)
        raise StoreUnavailable(f"metadata store etcd://{where} unreachable after {attempts} attempts"
                               f" ({what})")

    async def _connect(self) -> None:
        if self._client is not None:
            return
        host, port = self.address.endpoints[self._endpoint]
        client = aetcd.Client(host, port, timeout=self._timeout)
        try:
            await client.connect()
            await client.status()  # connect() is lazy in grpc: make one call
        except BaseException:
            await client.close()
            raise
        self._client = client

    async def _rotate_endpoint(self) -> None:
        """Move to the next endpoint; with one, gRPC reconnects the channel by itself.

        The old client is closed only after the request timeout, so calls still
        in flight on it end by themselves rather than being cancelled.
        """
        if len(self.address.endpoints) == 1 or self._client is None:
            return
        old, self._client = self._client, None
        self._endpoint = (self._endpoint + 1) % len(self.address.endpoints)
        asyncio.get_running_loop().call_later(self._timeout, self._close_later, old)

    def _close_later(self, client: aetcd.Client) -> None:
        task = asyncio.ensure_future(client.close())
        task.add_done_callback(lambda t: t.exception())

    async def close(self, stop_lease: bool = True) -> None:
        """Stop; `stop_lease=False` leaves the lease to expire, as a dead broker's does."""
        self._closed = True
        await cancel_until_done(self._tasks)
        if stop_lease and self._client is not None and self._lease_id is not None:
            with contextlib.suppress(Exception):
                await self._client.revoke_lease(self._lease_id)
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.close()
        self._client = None

    # -- the image and its watch --------------------------------------------

    def subscribe(self, listener: Listener) -> None:
        """`listener(key)` runs after each change is applied to the image (`""` after a load),
        and with REGISTERED once this broker has registered (again) and knows its lease: the
        watch event of the registration itself may arrive before that."""
        self._listeners.append(listener)

    async def _load(self) -> None:
        prefix = self._key("")
        found = await self.client.get_prefix(prefix)
        image = ClusterImage()
        for kv in found:
            image.apply(kv.key[len(prefix):].decode(), kv.value)
        self.image = image
        self._revision = found.header.revision
        self._tell("")

    async def _watch_forever(self) -> None:
        while not self._closed:
            try:
                await self._connect()
                await self._watch_once()
            except aetcd.exceptions.RevisionCompactedError:
                log.info("etcd history compacted past revision %d: reloading metadata", self._revision)
                await self._reload_quietly()
            except (aetcd.exceptions.ClientError, OSError) as e:
                log.warning("etcd watch lost (%s); re-creating it from revision %d",
                            type(e).__name__, self._revision + 1)
                await self._rotate_endpoint()
                await asyncio.sleep(0.5)

    async def _reload_quietly(self) -> None:
        with contextlib.suppress(aetcd.exceptions.ClientError):
            await self._load()

    async def _watch_once(self) -> None:
        prefix = self._key("")
        watch = await self.client.watch_prefix(prefix, start_revision=self._revision + 1)
        async for event in watch:
            value = event.kv.value if event.kind == "PUT" else None
            self._apply(event.kv.key[len(prefix):].decode(), value, event.kv.mod_revision)
        if not self._closed:
            raise aetcd.exceptions.ConnectionFailedError("watch stream ended")

    def _apply(self, key: str, value: bytes | None, revision: int) -> None:
        self.image.apply(key, value)
        self._revision = max(self._revision, revision)
        self._tell(key)

    def _tell(self, key: str) -> None:
        for listener in self._listeners:
            listener(key)

    async def wait_for(self, predicate: Callable[[ClusterImage], bool], timeout_s: float) -> bool:
        """Until the image satisfies `predicate` (for start-up and tests)."""
        deadline = time.monotonic() + timeout_s
        while not predicate(self.image):
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    # -- writes: every one compares before it writes --------------------------

    async def _txn(self, compare: list[Any], success: list[Any]) -> bool:
        succeeded, _ = await self.client.transaction(compare=compare, success=success, failure=[])
        return bool(succeeded)

    async def ensure_cluster_id(self, candidate: str) -> str:
        """The cluster id in etcd, created from `candidate` by the first broker."""
        key = self._key("cluster_id")
        tx = self.client.transactions
        await self._txn([tx.version(key) == 0], [tx.put(key, candidate.encode())])
        found = await self.client.get(key)
        assert found is not None
        return bytes(found.value).decode()

    async def create_topic(
        self, topic: TopicRecord, states: list[PartitionState], controller: ControllerRecord | None = None
    ) -> bool:
        """The partitions' states, then the topic record; False if the topic exists. Every
        transaction holds only while the topic does not exist (and `controller` leads), so a
        reader sees the topic once all its partitions are there (a partition without its topic
        is nobody's: ClusterRoles and Metadata go by the topic); the first clears what an
        interrupted creation of the name left (alone: etcd refuses a put and a delete of one key
        in one transaction)."""
        tx = self.client.transactions
        key = self._key(f"topics/{topic.name}")
        guards = [tx.version(key) == 0, *self._controller_guard(controller)]
        prefix = self._key(f"partitions/{topic.name}/")
        clear = tx.delete(prefix, range_end=aetcd.utils.prefix_range_end(prefix))
        if not await self._txn(guards, [clear]):
            return False
        puts = self._partition_puts(topic.name, dict(enumerate(states)))
        return await self._txns(guards, puts, tx.put(key, encode(topic)))

    async def add_partitions(
        self, old: TopicRecord, new: TopicRecord, states: dict[int, PartitionState],
        controller: ControllerRecord | None = None,
    ) -> bool:
        """The new partitions' states, then the grown topic record; False if the topic changed
        (or went) meanwhile. As in `create_topic`, the record comes last: the new states are
        nobody's until it names them."""
        tx = self.client.transactions
        key = self._key(f"topics/{old.name}")
        guards = [tx.value(key) == encode(old), *self._controller_guard(controller)]
        return await self._txns(guards, self._partition_puts(new.name, states), tx.put(key, encode(new)))

    def _partition_puts(self, topic: str, states: dict[int, PartitionState]) -> list[Any]:
        tx = self.client.transactions
        return [tx.put(self._key(f"partitions/{topic}/{i}"), encode(s)) for i, s in sorted(states.items())]

    async def _txns(self, guards: list[Any], ops: list[Any], last: Any) -> bool:
        """`ops` in transactions of at most TXN_PUTS, then `last`, each under `guards`; False
        as soon as one finds them broken."""
        for start in range(0, len(ops), TXN_PUTS):
            if not await self._txn(guards, ops[start:start + TXN_PUTS]):
                return False
        return await self._txn(guards, [last])

    async def set_topic_configs(self, old: TopicRecord, configs: dict[str, str]) -> bool:
        """`old` with new config overrides; False if the topic changed (or went) meanwhile."""
        tx = self.client.transactions
        key = self._key(f"topics/{old.name}")
        new = dataclasses.replace(old, configs=dict(configs))
        return await self._txn([tx.value(key) == encode(old)], [tx.put(key, encode(new))])

    async def delete_topic(self, name: str) -> None:
        await self.client.delete(self._key(f"topics/{name}"))
        await self.client.delete_prefix(self._key(f"partitions/{name}/"))

    async def alter_partition(
        self, topic: str, index: int, expected: PartitionState, new: PartitionState,
        controller: ControllerRecord | None = None,
    ) -> bool:
        """Replace `expected` with `new`; False when the stored state is another one.

        With `controller`, also only while that record still holds the controller
        key, so a deposed controller's decisions are never written.
        """
        tx = self.client.transactions
        key = self._key(f"partitions/{topic}/{index}")
        guards = [tx.value(key) == encode(expected)] + self._controller_guard(controller)
        return await self._txn(guards, [tx.put(key, encode(new))])

    def _controller_guard(self, controller: ControllerRecord | None) -> list[Any]:
        if controller is None:
            return []
        return [self.client.transactions.value(self._key("controller")) == encode(controller)]

    async def reserve_producer_ids(self, size: int) -> ProducerIdBlock:
        """Move the shared next-block pointer past a new block (retried on a race)."""
        key = self._key("producer_ids")
        tx = self.client.transactions
        while True:
            found = await self.client.get(key)
            first = int(found.value) if found is not None else 0
            guard = tx.value(key) == str(first).encode() if found is not None else tx.version(key) == 0
            block = ProducerIdBlock(first, size)
            if await self._txn([guard], [tx.put(key, str(block.last + 1).encode())]):
                return block

    # -- ACLs: one key each, named by the digest of the ACL's identity ----------------------------

    async def put_acls(self, acls: dict[str, list[Any]]) -> None:
        """Store each ACL (digest -> AclBinding.to_json()) in one transaction."""
        tx = self.client.transactions
        puts = [tx.put(self._key(f"acls/{d}"), json.dumps(v).encode()) for d, v in acls.items()]
        if puts:
            await self._txn([], puts)

    async def delete_acls(self, digests: list[str]) -> None:
        tx = self.client.transactions
        deletes = [tx.delete(self._key(f"acls/{d}")) for d in digests]
        if deletes:
            await self._txn([], deletes)

    # -- SCRAM credentials: one key per user and mechanism ---------------------------------------

    async def put_scram(self, puts: dict[str, list[Any]], deletes: list[str]) -> None:
        """Upsert ("<mechanism>/<user>" -> ScramCredential.to_json()) and delete in one transaction."""
        tx = self.client.transactions
        ops = [tx.put(self._key(f"scram/{k}"), json.dumps(v).encode()) for k, v in puts.items()]
        ops += [tx.delete(self._key(f"scram/{k}")) for k in deletes]
        if ops:
            await self._txn([], ops)

    # -- membership -----------------------------------------------------------

    async def end_own_session(self, registration: BrokerRegistration) -> bool:
        """Revoke the lease of the registration this node id holds if it carries the same data
        dir identity: the caller holds that data dir's lock, so its holder is this broker's
        own dead incarnation. True if a session was ended."""
        found = await self.client.get(self._key(f"brokers/{registration.node_id}"))
        if found is None or not registration.data_dir_id:
            return False
        holder = BrokerRegistration.from_json(json.loads(bytes(found.value)))
        if holder.data_dir_id != registration.data_dir_id:
            return False
        with contextlib.suppress(aetcd.exceptions.ClientError):  # it expired meanwhile
            await self.client.revoke_lease(found.lease)
        return True

    async def register(self, registration: BrokerRegistration) -> None:
        """Register under a fresh lease. NodeIdInUse if a live broker of another data dir holds
        the id; a holder without a data dir identity (an older broker) is waited out until its
        session ends, as Kafka's broker retries its registration. A lease that expired before
        its claim (the broker stalled longer than the session in between) is replaced."""
        while True:
            asked = time.monotonic()  # the lease may expire a session after this, not later
            lease = await self.client.lease(self._ttl)
            try:
                await self._claim(registration, lease.id)
                break
            except aetcd.exceptions.ClientError as exc:
                if not lease_not_found(exc):
                    await self._revoke_quietly(lease.id)
                    raise
                log.warning("broker %d: registration lease expired before it was claimed; registering again",
                            registration.node_id)
            except BaseException:
                await self._revoke_quietly(lease.id)
                raise
        await slow_point("etcd-registered")  # claimed, not yet known here: its watch event may come first
        self._registration = registration
        self._lease_id = lease.id
        self._lease_deadline = asked + self._ttl
        self._tell(REGISTERED)
        if not any(t.get_name() == "etcd-keepalive" for t in self._tasks):
            self._tasks.append(asyncio.create_task(self._keep_alive(), name="etcd-keepalive"))

    async def _revoke_quietly(self, lease_id: int) -> None:
        with contextlib.suppress(aetcd.exceptions.ClientError, OSError):
            await self.client.revoke_lease(lease_id)

    async def _claim(self, registration: BrokerRegistration, lease_id: int) -> None:
        tx = self.client.transactions
        key = self._key(f"brokers/{registration.node_id}")
        deadline = time.monotonic() + self._ttl + 1
        put = tx.put(key, encode(registration), lease=lease_id)
        while not await self._txn([tx.version(key) == 0], [put]):
            found = await self.client.get(key)
            holder = BrokerRegistration.from_json(json.loads(bytes(found.value))) if found else None
            if holder is not None and (holder.data_dir_id or time.monotonic() >= deadline):
                raise NodeIdInUse(f"node id {registration.node_id} is registered by a live broker")
            await asyncio.sleep(0.2)

    @property
    def session_s(self) -> float:
        return float(self._ttl)

    @property
    def registration_alive(self) -> bool:
        """False once the lease may have expired: such a broker must not act as leader."""
        return self._lease_id is not None and time.monotonic() < self._lease_deadline

    async def _keep_alive(self) -> None:
        while not self._closed:
            await asyncio.sleep(self._ttl / 3)
            try:
                await self._refresh_or_reregister()
            except (aetcd.exceptions.ClientError, OSError) as e:
                log.warning("etcd lease keep-alive failed (%s); %.1f s of registration left",
                            type(e).__name__, max(0.0, self._lease_deadline - time.monotonic()))
                await self._rotate_endpoint()
                with contextlib.suppress(aetcd.exceptions.ClientError, OSError):
                    await self._connect()

    async def _refresh_or_reregister(self) -> None:
        """Refresh the lease; once it expired, register again (also on the next round, when
        the last registration failed: etcd out of reach, say)."""
        assert self._registration is not None
        if self._lease_id is not None:
            sent = time.monotonic()
            reply = await self.client.refresh_lease(self._lease_id)
            if reply is not None and reply.TTL > 0:
                self._lease_deadline = sent + reply.TTL
                return
            log.warning("broker %d: registration lease expired; registering again",
                        self._registration.node_id)
            self._lease_id = None
            await slow_point("etcd-register-again")
        await self.register(self._registration)

    async def campaign(self, node_id: NodeId) -> ControllerRecord | None:
        """Become controller if there is none; the new record, or None if another holds it.

        The record goes under the lease this broker held when it began: if that lease ends
        meanwhile, etcd refuses the transaction (a ClientError, and the controller campaigns
        again). Reading the lease after the awaits instead could find none while the broker
        registers again, and aetcd writes a lease of None as no lease: a controller record
        that outlives its broker, and no broker campaigns again (chaos seed 95: 90 minutes
        without a controller)."""
        lease = self._lease_id
        if lease is None:
            return None
        tx = self.client.transactions
        key, epoch_key = self._key("controller"), self._key("controller_epoch")
        found = await self.client.get(epoch_key)
        epoch = int(found.value) + 1 if found is not None else 1
        epoch_guard = (tx.value(epoch_key) == str(epoch - 1).encode() if found is not None
                       else tx.version(epoch_key) == 0)
        record = ControllerRecord(node_id, epoch)
        await slow_point("controller-campaign")
        puts = [tx.put(key, encode(record), lease=lease), tx.put(epoch_key, str(epoch).encode())]
        won = await self._txn([tx.version(key) == 0, epoch_guard], puts)
        lost_answer_point("controller-campaign-answer")
        return record if won else None

    async def _controller_entry(self) -> tuple[ControllerRecord, int] | None:
        """The controller key's record and the lease it lives under, read from etcd (not the
        image); None while no broker holds it."""
        found = await self.client.get(self._key("controller"))
        if found is None:
            return None
        return ControllerRecord.from_json(json.loads(bytes(found.value))), found.lease

    async def holds_controller(self, record: ControllerRecord) -> bool:
        """Whether `record` is the controller key's value under this broker's current lease:
        a campaign whose answer was lost (a ClientError or a dropped connection after etcd
        applied it) may have won, and only its broker can tell (as Kafka's ZooKeeper
        controller recognised its own /controller node after a retried create)."""
        entry = await self._controller_entry()
        return self._lease_id is not None and entry == (record, self._lease_id)

    async def controller_held(self) -> bool:
        """Whether the controller record lives under its broker's current registration lease
        (read from etcd, not the image): a record under any other lease, or none, outlives
        its broker and no broker campaigns again (6527edb). For checks from outside."""
        entry = await self._controller_entry()
        if entry is None or not entry[1]:
            return False
        record, lease = entry
        registration = await self.client.get(self._key(f"brokers/{record.node_id}"))
        return registration is not None and registration.lease == lease


async def cancel_until_done(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel `tasks` and wait until each has ended, cancelling again those still running: on
    Python 3.11 a cancel that arrives as an `asyncio.wait_for` inside them completes is
    swallowed (aetcd's watch set-up), and the task then waits on its stream for good (a
    broker whose start failed right after it opened the store hung in its close)."""
    while pending := [t for t in tasks if not t.done()]:
        for task in pending:
            task.cancel()
        await asyncio.wait(pending, timeout=0.1)
    for task in tasks:  # retrieved: an exception a task ended with is not logged at exit
        if not task.cancelled():
            task.exception()


def lease_not_found(exc: aetcd.exceptions.ClientError) -> bool:
    """etcd's NOT_FOUND for a lease: it expired (or was revoked) before the request used it."""
    cause = exc.__cause__
    return isinstance(cause, aetcd.rpc.AioRpcError) and cause.code() == aetcd.rpc.StatusCode.NOT_FOUND
