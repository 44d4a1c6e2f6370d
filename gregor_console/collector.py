"""The console's asyncio edge to the cluster: `Cluster` runs the blocking admin calls on
worker threads (kafka-python's admin client does its I/O on a thread of its own and may be
called from several), connecting again after the cluster was unreachable; `Collector`
reads a snapshot every `interval_s` and keeps the LSO lags of the last minutes."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from kafka.errors import KafkaError
from kafka.structs import TopicPartition

from broker.tools.admin_port import AdminPort
from broker.tools.common import Security, ToolError, connect, describe_error
from gregor_console.collect import read_snapshot
from gregor_console.metrics import BrokerMetrics, read_all
from gregor_console.model import Snapshot

log = logging.getLogger("gregor.console")
T = TypeVar("T")
CLIENT_ID = "gregor-console"


class ClusterError(Exception):
    """An expected failure to read or act on the cluster: shown as its one-line message."""


class Cluster:
    """One admin client of the cluster at `bootstrap`, made on first use and made again
    after a failure that was not an answer of the cluster's (unreachable, timed out)."""

    def __init__(self, bootstrap: str, timeout_ms: int, security: Security) -> None:
        self.bootstrap = bootstrap
        self._timeout_ms = timeout_ms
        self._security = security
        self._lock = threading.Lock()
        self._admin: AdminPort | None = None

    async def run(self, what: str, fn: Callable[[AdminPort], T]) -> T:
        """`fn(admin)` on a worker thread; a failure is a ClusterError naming `what`."""
        try:
            return await asyncio.to_thread(self._call, fn)
        except ToolError as exc:
            raise ClusterError(f"{what}: {exc}") from None
        except KafkaError as exc:
            raise ClusterError(f"{what}: {describe_error(exc)}") from None

    def _call(self, fn: Callable[[AdminPort], T]) -> T:
        admin = self._client()
        try:
            return fn(admin)
        except KafkaError as exc:
            if getattr(exc, "errno", None) is None:  # not the cluster's answer: connect anew
                self._drop(admin)
            raise

    def _client(self) -> AdminPort:
        with self._lock:
            if self._admin is None:
                self._admin = connect(self.bootstrap, self._timeout_ms, CLIENT_ID, self._security)
            return self._admin

    def _drop(self, admin: AdminPort) -> None:
        with self._lock:
            if self._admin is admin:
                self._admin = None
        admin.close()

    def close(self) -> None:
        with self._lock:
            admin, self._admin = self._admin, None
        if admin is not None:
            admin.close()


@dataclass(frozen=True, slots=True)
class Sample:
    taken_ms: int
    lags: dict[TopicPartition, int]  # only the partitions whose LSO lags
    group_lags: dict[str, int]  # only the groups with a lag to the LSO


class LagHistory:
    """The LSO lags and the groups' lags to the LSO of the last `keep` snapshots (what has no
    lag takes no room)."""

    def __init__(self, keep: int) -> None:
        self._samples: deque[Sample] = deque(maxlen=max(keep, 2))

    def add(self, snapshot: Snapshot) -> None:
        lags = {p.topic_partition: p.lso_lag for p in snapshot.partitions if p.lso_lag > 0}
        group_lags = {g.group_id: g.lag_to_lso for g in snapshot.groups if g.lag_to_lso > 0}
        self._samples.append(Sample(snapshot.taken_ms, lags, group_lags))

    def series(self, tp: TopicPartition) -> list[int]:
        return [s.lags.get(tp, 0) for s in self._samples]

    def group_series(self, group_id: str) -> list[int]:
        return [s.group_lags.get(group_id, 0) for s in self._samples]

    def times(self) -> list[int]:
        return [s.taken_ms for s in self._samples]


def now_ms() -> int:
    return int(time.time() * 1000)


class Collector:
    """Reads a snapshot every `interval_s`; pages read the last one (never waiting for the
    cluster), and the last failure, shown above it."""

    def __init__(
        self, cluster: Cluster, interval_s: float, history_s: float, max_timeout_ms: int | None,
        metrics_urls: Sequence[str] = (),
    ) -> None:
        self.cluster = cluster
        self.metrics_urls = tuple(metrics_urls)
        self.metrics: list[BrokerMetrics] = []  # on Gregor, its brokers' transaction metrics
        self.interval_s = interval_s
        self.max_timeout_ms = max_timeout_ms
        self.snapshot: Snapshot | None = None
        self.error: str | None = None
        self.history = LagHistory(int(history_s / interval_s) + 1)
        self._refreshed = asyncio.Event()
        self._reading = asyncio.Lock()  # one read at a time: the loop's, or one after an abort

    async def run(self) -> None:
        while True:
            await self.refresh()
            await asyncio.sleep(self.interval_s)

    async def refresh(self) -> None:
        async with self._reading:
            await asyncio.gather(self._refresh(), self._read_metrics())

    async def _read_metrics(self) -> None:
        self.metrics = await read_all(self.metrics_urls)

    async def _refresh(self) -> None:
        try:
            snapshot = await self.cluster.run(
                f"cannot read the cluster at {self.cluster.bootstrap}",
                lambda admin: read_snapshot(admin, now_ms, self.max_timeout_ms),
            )
        except ClusterError as exc:
            if self.error != str(exc):
                log.warning("%s", exc)
            self.error = str(exc)
        else:
            if self.error is not None:
                log.info("reading the cluster at %s again", self.cluster.bootstrap)
            self.snapshot, self.error = snapshot, None
            self.history.add(snapshot)
        self._refreshed.set()

    async def first(self, timeout_s: float) -> None:
        """Wait (at most `timeout_s`) for the first refresh to end, well or not."""
        try:
            await asyncio.wait_for(self._refreshed.wait(), timeout_s)
        except TimeoutError:
            pass
