"""Custom collectors: what a scrape reports, read from the broker's state and from
`stats.STATS` at scrape time (on the event loop, see endpoint.py).

Names follow Kafka's JMX metrics as the Prometheus JMX exporter's usual Kafka rules
convert them: `kafka.<domain>:type=<Type>,name=<Name>PerSec,<tags>` becomes the counter
`kafka_<domain>_<type>_<name>_total{<tags>}`, a gauge or timer `..._<name>` in lower
case; Gregor's own metrics, without a Kafka counterpart, start with `gregor_`.
docs/operations.md ("Metrics") lists them all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from broker.base.clock import now_ms
from broker.metrics.request_log import api_name
from broker.metrics.stats import Histogram, Stats
from coordinator.transaction.state import TxnState
from protocol.errors import ErrorCode
from protocol.messages import REQUESTS

if TYPE_CHECKING:
    from broker.replication.replica_manager import Partition
    from coordinator.transaction.state import TxnMetadata

NET = "kafka_network_requestmetrics_"
TOPIC = "kafka_server_brokertopicmetrics_"
OPEN_STATES = (
    TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.PREPARE_EPOCH_FENCE,
)


def _api(api_key: int) -> str:
    request = REQUESTS.get(api_key)
    return api_name(request) if request is not None else str(api_key)


def _error(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def _histogram(name: str, doc: str, labels: list[str]) -> HistogramMetricFamily:
    return HistogramMetricFamily(name, doc, labels=labels)


def _add(family: HistogramMetricFamily, labels: list[str], h: Histogram) -> None:
    family.add_metric(labels, h.cumulative(), h.sum)


class StatsCollector(Collector):
    """The counters and timings the broker's code paths update (stats.STATS)."""

    def __init__(self, stats: Stats, topic_exists: Callable[[str], bool]) -> None:
        self.stats = stats
        self.topic_exists = topic_exists

    def collect(self) -> Iterator[Metric]:
        yield from self._requests()
        yield from self._topics()
        yield from self._transactions()
        yield from self._others()

    def _requests(self) -> Iterator[Metric]:
        s = self.stats
        requests = CounterMetricFamily(NET + "requests", "Requests answered, by API and version.",
                                       labels=["request", "version"])
        for (key, version), api in sorted(s.apis.items()):
            requests.add_metric([_api(key), str(version)], api.requests)
        errors = CounterMetricFamily(NET + "errors", "Error codes in responses (one per partition or "
                                     "entry; NONE included, as Kafka counts it).",
                                     labels=["request", "error"])
        for (key, code), n in sorted(s.errors.items()):
            errors.add_metric([_api(key), _error(code)], n)
        total = _histogram(NET + "totaltimems", "Time from reading a request to its response being "
                           "ready, in ms.", ["request"])
        queue = _histogram(NET + "requestqueuetimems", "Time from reading a request to its handler "
                           "starting, in ms.", ["request"])
        for key, times in sorted(s.api_times.items()):
            _add(total, [_api(key)], times.total)
            _add(queue, [_api(key)], times.queue)
        yield from (requests, errors, total, queue)

    def _topics(self) -> Iterator[Metric]:
        for gone in [name for name in self.stats.topics if not self.topic_exists(name)]:
            self.stats.forget_topic(gone)  # a deleted topic's counters go, as in Kafka
        fields = (
            ("bytesin", "bytes_in", "Bytes appended by producers."),
            ("messagesin", "messages_in", "Records appended by producers."),
            ("bytesout", "bytes_out", "Bytes sent to consumers."),
            ("replicationbytesout", "replication_bytes_out", "Bytes sent to follower replicas."),
            ("failedproducerequests", "failed_produce", "Produce partitions answered with an error."),
            ("failedfetchrequests", "failed_fetch", "Fetch partitions answered with an error."),
        )
        for name, attr, doc in fields:
            family = CounterMetricFamily(TOPIC + name, doc, labels=["topic"])
            for topic, t in sorted(self.stats.topics.items()):
                family.add_metric([topic], getattr(t, attr))
            yield family

    def _transactions(self) -> Iterator[Metric]:
        txn = self.stats.txn
        completed = CounterMetricFamily("gregor_transaction_completed", "Transactions this broker's "
                                        "coordinator completed (CompleteCommit / CompleteAbort written).",
                                        labels=["result"])
        latency = _histogram("gregor_transaction_completion_time_ms", "EndTxn (Prepare* written) to "
                             "Complete* written, in ms.", ["result"])
        for result in ("commit", "abort"):
            completed.add_metric([result], txn.completed[result])
            _add(latency, [result], txn.completion_ms[result])
        markers = _histogram("gregor_transaction_marker_send_time_ms", "One round of WriteTxnMarkers "
                             "for a transaction's partitions, sent until answered, in ms.", [])
        _add(markers, [], txn.marker_round_ms)
        failures = CounterMetricFamily("gregor_transaction_marker_failures", "Markers answered with "
                                       "an error (sent again unless the error is final).", labels=["error"])
        for error, n in sorted(txn.marker_failures.items()):
            failures.add_metric([error], n)
        parked = CounterMetricFamily("gregor_transaction_parked_requests", "Requests that found their "
                                     "transactional id's previous transaction completing and waited "
                                     "for it instead of being answered CONCURRENT_TRANSACTIONS.")
        parked.add_metric([], txn.parked)
        yield from (completed, latency, markers, failures, parked)

    def _others(self) -> Iterator[Metric]:
        s = self.stats
        flush = _histogram("kafka_log_logflushstats_logflushrateandtimems", "Time of one log flush "
                           "(fsync), in ms.", [])
        _add(flush, [], s.flush_ms)
        load = _histogram("gregor_coordinator_partition_load_time_ms", "Time to load one "
                          "internal-topic partition into its coordinator, in ms.", ["coordinator"])
        for kind, h in sorted(s.load_ms.items()):
            _add(load, [kind], h)
        rebalances = CounterMetricFamily("kafka_server_group_coordinator_metrics_group_rebalance",
                                         "Rebalances completed (a new generation) by this coordinator.",
                                         value=s.rebalances)
        created = CounterMetricFamily("kafka_server_socket_server_metrics_connection_creation",
                                      "Client connections accepted.", value=s.connections_created)
        shrinks = CounterMetricFamily("kafka_server_replicamanager_isrshrinks", "ISR shrinks of "
                                      "partitions this broker leads.", value=s.cluster.isr_shrinks)
        expands = CounterMetricFamily("kafka_server_replicamanager_isrexpands", "ISR expansions of "
                                      "partitions this broker leads.", value=s.cluster.isr_expands)
        changes = CounterMetricFamily("gregor_controller_changes", "Times this broker saw the "
                                      "controller change.", value=s.cluster.controller_changes)
        denials = CounterMetricFamily("gregor_authorization_denials", "Requests or operations the "
                                      "authorizer denied, by resource type.", labels=["resource_type"])
        for resource_type, n in sorted(s.authorization_denials.items()):
            denials.add_metric([resource_type], n)
        failures = CounterMetricFamily("gregor_authentication_failures", "SASL authentications and "
                                       "client certificates refused, by listener", labels=["listener"])
        for listener, n in sorted(s.authentication_failures.items()):
            failures.add_metric([listener], n)
        by_listener = CounterMetricFamily("gregor_connections_created", "Client connections "
                                          "accepted, by listener and security protocol.",
                                          labels=["listener", "security_protocol"])
        for (listener, protocol), n in sorted(s.connections_by_listener.items()):
            by_listener.add_metric([listener, protocol], n)
        yield from (flush, load, rebalances, created, by_listener, shrinks, expands, changes, denials,
                    failures)
        yield from self._connection_quotas()
        yield from self._hanging()

    def _connection_quotas(self) -> Iterator[Metric]:
        s = self.stats
        refused = CounterMetricFamily("gregor_connections_refused", "Connections closed as soon as "
                                      "accepted: their address was at max.connections.per.ip, by "
                                      "listener.", labels=["listener"])
        for listener, n in sorted(s.connections_refused.items()):
            refused.add_metric([listener], n)
        throttle = CounterMetricFamily("kafka_server_socket_server_metrics_connection_accept_throttle_time",
                                       "Time accepts waited for max.connection.creation.rate, in ms, "
                                       "by listener.", labels=["listener"])
        for listener, ms in sorted(s.accept_throttle_ms.items()):
            throttle.add_metric([listener], ms)
        blocked = CounterMetricFamily("kafka_network_acceptor_acceptorblocked_seconds", "Time the "
                                      "acceptor waited for a connection to close (max.connections), "
                                      "by listener.", labels=["listener"])
        for listener, seconds in sorted(s.accept_blocked_s.items()):
            blocked.add_metric([listener], seconds)
        yield from (refused, throttle, blocked)

    def _hanging(self) -> Iterator[Metric]:
        h = self.stats.hanging
        found = GaugeMetricFamily("gregor_transaction_hanging", "Hanging transactions found by the "
                                  "last check (1 per open transaction).",
                                  labels=["topic", "partition", "producer_id", "start_offset"])
        for topic, partition, pid, offset in h.found:
            found.add_metric([topic, str(partition), str(pid), str(offset)], 1)
        count = GaugeMetricFamily("gregor_transaction_hanging_count", "Hanging transactions found by "
                                  "the last check.", value=len(h.found))
        checks = CounterMetricFamily("gregor_transaction_hanging_checks", "Hanging-transaction checks run.",
                                     value=h.checks)
        aborted = CounterMetricFamily("gregor_transaction_hanging_aborted", "Hanging transactions aborted "
                                      "by transaction.hanging.auto.abort.enable.", value=h.aborted)
        yield from (found, count, checks, aborted)


@dataclass(frozen=True, slots=True)
class ControllerStatus:
    active: bool  # this broker is the active controller (a single broker is its own)
    offline_partitions: int  # partitions without a leader, counted by the active controller
    epoch: int | None  # of the controller this broker knows of (-1 none); None on a single broker


@dataclass(frozen=True, slots=True)
class StateSources:
    """Where the gauges are read at scrape time: narrow getters, each from its owner."""

    partitions: Callable[[], list[Partition]]
    connections: Callable[[], int]
    transactions: Callable[[], Mapping[str, TxnMetadata]]
    group_states: Callable[[], Iterable[str]]
    controller: Callable[[], ControllerStatus]
    connections_by_listener: Callable[[], Mapping[tuple[str, str], int]]


class BrokerStateCollector(Collector):
    """Gauges read from the broker's partitions, coordinators and cluster image."""

    def __init__(self, sources: StateSources) -> None:
        self.sources = sources

    def collect(self) -> Iterator[Metric]:
        yield from self._partitions(self.sources.partitions())
        yield from self._transactions()
        yield from self._groups()
        yield from self._cluster()
        yield GaugeMetricFamily("kafka_server_socket_server_metrics_connection_count",
                                "Open client connections.", value=self.sources.connections())
        by_listener = GaugeMetricFamily("gregor_connections", "Open client connections, by listener "
                                        "and security protocol.", labels=["listener", "security_protocol"])
        for (listener, protocol), n in sorted(self.sources.connections_by_listener().items()):
            by_listener.add_metric([listener, protocol], n)
        yield by_listener

    def _partitions(self, parts: list[Partition]) -> Iterator[Metric]:
        labels = ["topic", "partition"]
        leo = GaugeMetricFamily("kafka_log_log_logendoffset", "Log end offset.", labels=labels)
        start = GaugeMetricFamily("kafka_log_log_logstartoffset", "Log start offset.", labels=labels)
        size = GaugeMetricFamily("kafka_log_log_size", "Bytes of the partition's segments.", labels=labels)
        hw = GaugeMetricFamily("kafka_log_log_highwatermark", "High watermark.", labels=labels)
        lso = GaugeMetricFamily("kafka_log_log_laststableoffset", "Last stable offset.", labels=labels)
        lag = GaugeMetricFamily("kafka_cluster_partition_laststableoffsetlag", "High watermark minus "
                                "last stable offset (open transactions hold it up).", labels=labels)
        producers = 0
        under_replicated = 0
        for part in sorted(parts, key=lambda p: (p.topic, p.index)):
            tp = [part.topic, str(part.index)]
            log = part.log
            high, stable = log.high_watermark, log.last_stable_offset
            leo.add_metric(tp, log.log_end_offset)
            start.add_metric(tp, log.log_start_offset)
            size.add_metric(tp, log.size_in_bytes)
            hw.add_metric(tp, high)
            lso.add_metric(tp, stable)
            lag.add_metric(tp, high - stable)
            producers += log.producer_state.producer_count
            leader = part.leader
            if leader is not None and len(leader.isr) < len(leader.state.replicas):
                under_replicated += 1
        yield from (leo, start, size, hw, lso, lag)
        yield GaugeMetricFamily("kafka_server_replicamanager_produceridcount", "Producer ids with state "
                                "in the partitions this broker hosts (summed over partitions).",
                                value=producers)
        yield GaugeMetricFamily("kafka_server_replicamanager_underreplicatedpartitions", "Partitions "
                                "this broker leads whose ISR is smaller than their replica set.",
                                value=under_replicated)
        yield GaugeMetricFamily("kafka_server_replicamanager_partitioncount", "Partitions hosted.",
                                value=len(parts))
        yield GaugeMetricFamily("kafka_server_replicamanager_leadercount", "Partitions led.",
                                value=sum(1 for p in parts if p.leader is not None))

    def _transactions(self) -> Iterator[Metric]:
        states: Counter[TxnState] = Counter()
        oldest: dict[TxnState, int] = {}
        now = now_ms()
        for md in self.sources.transactions().values():
            states[md.state] += 1
            if md.state in OPEN_STATES and md.txn_start_ms >= 0:
                oldest[md.state] = max(oldest.get(md.state, 0), now - md.txn_start_ms)
        count = GaugeMetricFamily("gregor_transactions", "Transactional ids this broker coordinates, "
                                  "by state.", labels=["state"])
        age = GaugeMetricFamily("gregor_transaction_oldest_age_ms", "Age of the oldest open transaction "
                                "(since its start), by state; 0 when none.", labels=["state"])
        for state in TxnState:
            if state is not TxnState.DEAD:
                count.add_metric([state.display_name], states[state])
        for state in OPEN_STATES:
            age.add_metric([state.display_name], oldest.get(state, 0))
        yield from (count, age)

    def _groups(self) -> Iterator[Metric]:
        states: Counter[str] = Counter(self.sources.group_states())
        family = GaugeMetricFamily("kafka_coordinator_group_groupmetadatamanager_numgroups",
                                   "Consumer groups this broker coordinates, by state.", labels=["state"])
        for state in ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"):
            family.add_metric([state], states[state])
        yield family

    def _cluster(self) -> Iterator[Metric]:
        status = self.sources.controller()
        yield GaugeMetricFamily("kafka_controller_kafkacontroller_activecontrollercount",
                                "1 on the active controller (a single broker is its own).",
                                value=1 if status.active else 0)
        yield GaugeMetricFamily("kafka_controller_kafkacontroller_offlinepartitionscount",
                                "Partitions without a leader (reported by the active controller).",
                                value=status.offline_partitions)
        if status.epoch is not None:
            yield GaugeMetricFamily("gregor_controller_epoch", "Epoch of the controller this broker "
                                    "knows of (-1: none).", value=status.epoch)
