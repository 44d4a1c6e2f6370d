"""Counters and histograms kept as plain Python numbers, read by the collectors at scrape.

The event loop is the only writer: an increment is an attribute add, an observation
one bisect, so the request path pays a dict lookup and a few additions per request.
prometheus-client's own Counter/Histogram take a lock per update; these do not need
one because scrapes run on the same event loop (broker.metrics.endpoint).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import defaultdict
from dataclasses import dataclass, field

# Milliseconds, for request, flush, marker and load times (Kafka's metrics are in ms).
MS_BUCKETS: tuple[float, ...] = (
    0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 30000.0,
)


def clock() -> float:
    """Monotonic seconds (what the timing hooks take as a start)."""
    return time.monotonic()


class Histogram:
    """Bucket counts (not cumulative; the collector sums them), total and count."""

    __slots__ = ("bounds", "counts", "sum", "count")

    def __init__(self, bounds: tuple[float, ...] = MS_BUCKETS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, cumulative count) pairs ending with +Inf, as HistogramMetricFamily wants."""
        out, running = [], 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += n
            out.append(("+Inf" if bound == float("inf") else repr(bound), running))
        return out


class ApiTimes:
    """Per API (all versions): total time and queue time."""

    __slots__ = ("total", "queue")

    def __init__(self) -> None:
        self.total = Histogram()
        self.queue = Histogram()


class ApiVersionStats:
    """Per API and version: requests answered; errors by code."""

    __slots__ = ("api_key", "version", "requests", "times")

    def __init__(self, api_key: int, version: int, times: ApiTimes) -> None:
        self.api_key = api_key
        self.version = version
        self.requests = 0
        self.times = times


@dataclass
class TopicStats:
    """Kafka's BrokerTopicMetrics for one topic."""

    bytes_in: int = 0
    messages_in: int = 0
    bytes_out: int = 0
    replication_bytes_out: int = 0
    failed_produce: int = 0
    failed_fetch: int = 0


@dataclass
class TxnStats:
    """Transaction coordinator counters (this broker's coordinator)."""

    completed: dict[str, int] = field(default_factory=lambda: {"commit": 0, "abort": 0})
    # EndTxn (Prepare* written) until Complete* written, per result.
    completion_ms: dict[str, Histogram] = field(
        default_factory=lambda: {"commit": Histogram(), "abort": Histogram()}
    )
    prepared_at: dict[str, float] = field(default_factory=dict)  # transactional id -> clock()
    marker_round_ms: Histogram = field(default_factory=Histogram)
    marker_failures: defaultdict[str, int] = field(default_factory=lambda: defaultdict(int))
    parked: int = 0  # requests that waited for their id's transaction to complete


@dataclass
class HangingStats:
    """The last hanging-transaction check, and what it aborted."""

    found: list[tuple[str, int, int, int]] = field(default_factory=list)  # topic, partition, pid, offset
    checks: int = 0
    aborted: int = 0


@dataclass
class ClusterStats:
    isr_shrinks: int = 0
    isr_expands: int = 0
    controller_changes: int = 0


class Stats:
    """Everything counted between scrapes, for one broker process."""

    def __init__(self) -> None:
        self.apis: dict[tuple[int, int], ApiVersionStats] = {}
        self.api_times: dict[int, ApiTimes] = {}
        self.errors: defaultdict[tuple[int, int], int] = defaultdict(int)  # (api key, error code)
        self.topics: dict[str, TopicStats] = {}
        self.connections_created = 0
        self.connections_by_listener: defaultdict[tuple[str, str], int] = defaultdict(int)
        self.connections_refused: defaultdict[str, int] = defaultdict(int)  # by listener (per IP)
        self.accept_throttle_ms: defaultdict[str, int] = defaultdict(int)  # by listener
        self.accept_blocked_s: defaultdict[str, float] = defaultdict(float)  # by listener
        self.authorization_denials: defaultdict[str, int] = defaultdict(int)  # by resource type
        self.authentication_failures: defaultdict[str, int] = defaultdict(int)  # by listener
        self.flush_ms = Histogram()
        self.txn = TxnStats()
        self.load_ms: dict[str, Histogram] = {"transaction": Histogram(), "group": Histogram()}
        self.rebalances = 0
        self.hanging = HangingStats()
        self.cluster = ClusterStats()

    def api(self, api_key: int, version: int) -> ApiVersionStats:
        found = self.apis.get((api_key, version))
        if found is None:
            times = self.api_times.get(api_key)
            if times is None:
                times = self.api_times[api_key] = ApiTimes()
            found = self.apis[(api_key, version)] = ApiVersionStats(api_key, version, times)
        return found

    def topic(self, name: str) -> TopicStats:
        found = self.topics.get(name)
        if found is None:
            found = self.topics[name] = TopicStats()
        return found

    def forget_topic(self, name: str) -> None:
        self.topics.pop(name, None)


STATS = Stats()
