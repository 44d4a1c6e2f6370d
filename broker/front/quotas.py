"""Kafka's connection quotas (SocketServer.scala's ConnectionQuotas), without I/O.

Counts the open connections by IP address, by listener and in all, and decides what Kafka's
acceptor does with a new one (the asyncio side is `acceptor.py`):

- `max.connections` (per listener: `listener.name.<l>.max.connections`, default the broker's):
  with no slot the acceptor waits, accepting nothing more on that listener, until a connection
  closes; with several listeners the inter-broker one is held only to its own limit.
- `max.connection.creation.rate` (per listener likewise): each accept is recorded in Kafka's
  windowed `Rate` (11 samples of 1 s); over the limit the acceptor waits the time that brings
  the rate back to it, at most one window.
- `max.connections.per.ip` and `max.connections.per.ip.overrides`: a connection from an address
  already at its limit is closed as soon as it is accepted.

Time is passed in (`now_ms`), so the rate is tested with a fake clock.
"""

from __future__ import annotations

import ipaddress
import socket
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from broker.config import INT_MAX, KEYS, BrokerConfig, ConfigError, ip_overrides
from storage.log_config import CONNECTION_DYNAMIC_BROKER_CONFIGS

QUOTA_WINDOW_MS = 1000  # Kafka's quota.window.size.seconds (1)
QUOTA_SAMPLES = 11  # Kafka's quota.window.num
MAX_THROTTLE_MS = QUOTA_WINDOW_MS  # ConnectionQuotas.maxThrottleTimeMs: one window


@dataclass(slots=True)
class _Sample:
    start_ms: int
    last_ms: int
    value: float = 0.0

    def reset(self, now_ms: int) -> None:
        self.start_ms = self.last_ms = now_ms
        self.value = 0.0


class Rate:
    """Kafka's `Rate` over a `WindowedSum` with an upper-bound quota (`Sensor.record` then
    `checkQuotas`): `record` counts one event and answers the throttle time, 0 within the limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.samples: list[_Sample] = []
        self.current = 0

    def record(self, now_ms: int) -> int:
        sample = self._current(now_ms)
        if now_ms - sample.start_ms >= QUOTA_WINDOW_MS:
            sample = self._advance(now_ms)
        sample.value += 1
        sample.last_ms = now_ms
        rate = self.measure(now_ms)
        if rate <= self.limit:
            return 0
        throttle = round((rate - self.limit) / self.limit * self.window_ms(now_ms))  # QuotaUtils
        return min(throttle, MAX_THROTTLE_MS)

    def measure(self, now_ms: int) -> float:
        """Events per second over the retained samples."""
        self._purge(now_ms)
        return sum(s.value for s in self.samples) / (self.window_ms(now_ms) / 1000)

    def window_ms(self, now_ms: int) -> int:
        """Rate.windowSize: the time since the oldest sample, never less than all but one window."""
        self._purge(now_ms)
        elapsed = now_ms - min(s.start_ms for s in self.samples) if self.samples else 0
        full = elapsed // QUOTA_WINDOW_MS
        if full < QUOTA_SAMPLES - 1:
            elapsed += (QUOTA_SAMPLES - 1 - full) * QUOTA_WINDOW_MS
        return max(elapsed, 1)

    def _current(self, now_ms: int) -> _Sample:
        if not self.samples:
            self.samples.append(_Sample(now_ms, now_ms))
        return self.samples[self.current]

    def _advance(self, now_ms: int) -> _Sample:
        self.current = (self.current + 1) % (QUOTA_SAMPLES + 1)  # one more for the overlapping one
        if self.current >= len(self.samples):
            self.samples.append(_Sample(now_ms, now_ms))
        else:
            self.samples[self.current].reset(now_ms)
        return self.samples[self.current]

    def _purge(self, now_ms: int) -> None:
        for sample in self.samples:
            if now_ms - sample.last_ms >= QUOTA_SAMPLES * QUOTA_WINDOW_MS:
                sample.reset(now_ms)


@dataclass(frozen=True)
class ConnectionLimits:
    """The limits, read once from the config (host names of the overrides resolved)."""

    max_connections: int = INT_MAX
    per_ip: int = INT_MAX
    per_ip_overrides: Mapping[str, int] = field(default_factory=dict)  # IP address -> limit
    creation_rate: int = INT_MAX
    listener_max: Mapping[str, int] = field(default_factory=dict)
    listener_rate: Mapping[str, int] = field(default_factory=dict)
    inter_broker: str = ""

    @staticmethod
    def current(config: BrokerConfig) -> ConnectionLimits:
        """The limits with the dynamic broker configs in force (`config.explicit` is live)."""
        values = dict(config.values)
        for key in CONNECTION_DYNAMIC_BROKER_CONFIGS:
            if key in config.explicit:
                values[key] = KEYS[key].parse(config.explicit[key])
        return ConnectionLimits.of(replace(config, values=values))

    @staticmethod
    def of(config: BrokerConfig) -> ConnectionLimits:
        names = list(config.listeners)
        return ConnectionLimits(
            max_connections=config.max_connections,
            per_ip=config.max_connections_per_ip,
            per_ip_overrides=_resolved(ip_overrides(config.max_connections_per_ip_overrides)),
            creation_rate=config.max_connection_creation_rate,
            listener_max={name: config.max_connections_on(name) for name in names},
            listener_rate={name: config.max_connection_creation_rate_on(name) for name in names},
            inter_broker=config.inter_broker_listener,
        )


def _resolved(overrides: Mapping[str, int]) -> dict[str, int]:
    """Each override's host as the addresses it names (Kafka: InetAddress.getByName)."""
    found: dict[str, int] = {}
    for host, count in overrides.items():
        for address in _addresses(host):
            found[address] = count
    return found


def _addresses(host: str) -> list[str]:
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError as exc:
        raise ConfigError(f"max.connections.per.ip.overrides: cannot resolve {host}: {exc}") from None
    return sorted({str(info[4][0]) for info in infos})


def _rate(limit: int, rate: Rate | None = None) -> Rate | None:
    """The rate of a limit; an existing one keeps its samples (Kafka updates the quota's bound)."""
    if limit >= INT_MAX:
        return None  # no limit: nothing to record
    if rate is None:
        return Rate(limit)
    rate.limit = limit
    return rate


class ConnectionQuotas:
    """The open connections and the decisions of Kafka's ConnectionQuotas, for every listener."""

    def __init__(self, limits: ConnectionLimits, listeners: Iterable[str]) -> None:
        self.limits = limits
        self.by_ip: defaultdict[str, int] = defaultdict(int)
        self.by_listener: dict[str, int] = {name: 0 for name in listeners}
        self.total = 0
        self.broker_rate = _rate(limits.creation_rate)
        self.listener_rates = {name: _rate(limits.listener_rate.get(name, limits.creation_rate))
                               for name in self.by_listener}

    def update(self, limits: ConnectionLimits) -> None:
        """New limits (dynamic broker configs); what is open stays open, as in Kafka."""
        self.limits = limits
        self.broker_rate = _rate(limits.creation_rate, self.broker_rate)
        self.listener_rates = {name: _rate(limits.listener_rate.get(name, limits.creation_rate), rate)
                               for name, rate in self.listener_rates.items()}

    def _protected(self, listener: str) -> bool:
        """Kafka's protectedListener: the inter-broker listener, when there are others."""
        return listener == self.limits.inter_broker and len(self.by_listener) > 1

    def throttle_ms(self, listener: str, now_ms: int) -> int:
        """Record a new connection on the creation rates; how long its accept waits (the longer
        of the broker's and the listener's; the inter-broker listener only its own)."""
        broker = 0
        if self.broker_rate is not None and not self._protected(listener):
            broker = self.broker_rate.record(now_ms)
        own = self.listener_rates.get(listener)
        return max(broker, own.record(now_ms) if own is not None else 0)

    def slot_available(self, listener: str) -> bool:
        """A connection may be accepted on `listener` now (`max.connections`, its listener's)."""
        if self.by_listener.get(listener, 0) >= self.limits.listener_max.get(listener, INT_MAX):
            return False
        return self._protected(listener) or self.total < self.limits.max_connections

    def ip_limit(self, ip: str) -> int:
        return self.limits.per_ip_overrides.get(ip, self.limits.per_ip)

    def open(self, listener: str, ip: str) -> int | None:
        """Count a connection from `ip`; None, or the address's limit when it is already at it
        (then nothing is counted and the connection is to be closed)."""
        limit = self.ip_limit(ip)
        if self.by_ip[ip] >= limit:
            if not self.by_ip[ip]:
                del self.by_ip[ip]
            return limit
        self.by_ip[ip] += 1
        self.by_listener[listener] = self.by_listener.get(listener, 0) + 1
        self.total += 1
        return None

    def close(self, listener: str, ip: str) -> None:
        left = self.by_ip[ip] - 1
        if left > 0:
            self.by_ip[ip] = left
        else:
            del self.by_ip[ip]
        self.by_listener[listener] -= 1
        self.total -= 1
