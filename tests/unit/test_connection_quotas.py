"""Kafka's connection quotas without sockets (broker/front/quotas.py): the counts, the slots,
the per-IP limit and Kafka's windowed connection-creation rate, on a fake clock."""

from __future__ import annotations

import pytest

from broker.config import INT_MAX, ConfigError, build_config
from broker.front.quotas import MAX_THROTTLE_MS, ConnectionLimits, ConnectionQuotas, Rate


def test_per_ip_limit_and_overrides() -> None:
    quotas = ConnectionQuotas(ConnectionLimits(per_ip=2, per_ip_overrides={"127.0.0.2": 1}), ["PLAINTEXT"])
    assert quotas.open("PLAINTEXT", "127.0.0.1") is None
    assert quotas.open("PLAINTEXT", "127.0.0.1") is None
    assert quotas.open("PLAINTEXT", "127.0.0.1") == 2  # refused, not counted
    assert quotas.open("PLAINTEXT", "127.0.0.2") is None
    assert quotas.open("PLAINTEXT", "127.0.0.2") == 1
    assert quotas.total == 3 and quotas.by_ip == {"127.0.0.1": 2, "127.0.0.2": 1}
    quotas.close("PLAINTEXT", "127.0.0.2")
    assert quotas.by_ip == {"127.0.0.1": 2} and quotas.total == 2
    assert quotas.open("PLAINTEXT", "127.0.0.2") is None


def test_zero_per_ip_refuses_all_but_the_overrides() -> None:
    quotas = ConnectionQuotas(ConnectionLimits(per_ip=0, per_ip_overrides={"127.0.0.1": 5}), ["PLAINTEXT"])
    assert quotas.open("PLAINTEXT", "10.0.0.1") == 0
    assert quotas.by_ip == {}
    assert quotas.open("PLAINTEXT", "127.0.0.1") is None


def test_broker_and_listener_slots() -> None:
    limits = ConnectionLimits(max_connections=3, listener_max={"CLIENT": 2, "BROKER": 3},
                              inter_broker="BROKER")
    quotas = ConnectionQuotas(limits, ["CLIENT", "BROKER"])
    quotas.open("CLIENT", "a")
    quotas.open("CLIENT", "a")
    assert not quotas.slot_available("CLIENT")  # its listener's limit
    quotas.open("BROKER", "b")
    assert quotas.slot_available("BROKER")  # the inter-broker listener: only its own limit
    quotas.open("BROKER", "b")
    assert quotas.total == 4
    quotas.close("CLIENT", "a")
    assert not quotas.slot_available("CLIENT")  # the broker-wide limit
    quotas.close("BROKER", "b")
    quotas.close("BROKER", "b")
    assert quotas.slot_available("CLIENT")


def test_single_listener_is_not_protected() -> None:
    quotas = ConnectionQuotas(ConnectionLimits(max_connections=1, inter_broker="PLAINTEXT"), ["PLAINTEXT"])
    quotas.open("PLAINTEXT", "a")
    assert not quotas.slot_available("PLAINTEXT")


def test_rate_allows_ten_windows_of_burst_then_throttles() -> None:
    """Rate.windowSize counts at least 10 full windows: at 5/s the first 50 connections of a
    second pass, the 51st waits (O - T) / T * W, Kafka's QuotaUtils.throttleTime."""
    rate = Rate(5)
    assert all(rate.record(1_000) == 0 for _ in range(50))
    assert rate.record(1_000) == round((51 / 10.0 - 5) / 5 * 10_000)  # 200 ms
    many = [rate.record(1_000) for _ in range(100)]
    assert max(many) == MAX_THROTTLE_MS  # never more than one window


def test_rate_forgets_old_samples() -> None:
    rate = Rate(5)
    for _ in range(60):
        rate.record(0)
    assert rate.record(0) > 0
    assert rate.record(11_000) == 0  # every sample older than 11 windows is reset


def test_rate_over_time_holds_the_limit() -> None:
    """Connections paced by the throttle the rate answers stay near the limit over time."""
    rate, now, accepted = Rate(20), 0, 0
    while now < 60_000:
        now += rate.record(now) or 1
        accepted += 1
    assert 20 * 60 <= accepted <= 20 * 60 + 20 * 11  # the burst of the first windows, then 20/s


def test_limits_from_config() -> None:
    config = build_config({
        "listeners": "CLIENT://127.0.0.1:9092,BROKER://127.0.0.1:9093",
        "listener.security.protocol.map": "CLIENT:PLAINTEXT,BROKER:PLAINTEXT",
        "inter.broker.listener.name": "BROKER",
        "max.connections": 100, "listener.name.client.max.connections": 40,
        "max.connections.per.ip": 0, "max.connections.per.ip.overrides": "127.0.0.1:7,localhost:3",
        "listener.name.broker.max.connection.creation.rate": 9,
    })
    limits = ConnectionLimits.of(config)
    assert limits.listener_max == {"CLIENT": 40, "BROKER": 100}
    assert limits.listener_rate == {"CLIENT": INT_MAX, "BROKER": 9}
    assert limits.per_ip == 0 and limits.per_ip_overrides["127.0.0.1"] in (7, 3)  # localhost is 127.0.0.1
    assert limits.inter_broker == "BROKER"


@pytest.mark.parametrize(("raw", "message"), [
    ({"max.connections.per.ip": 0}, "can be set to zero only if max.connections.per.ip.overrides"),
    ({"max.connections.per.ip.overrides": "127.0.0.1"}, "overrides must be host:count"),
    ({"max.connections": -1}, "max.connections must be an integer \u2265 0"),
    ({"listener.name.plaintext.max.connections.per.ip": 3}, "unknown configuration key"),
])
def test_bad_limits_are_refused(raw: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_config(raw)


def test_new_limits_keep_what_is_open_and_the_rate_samples() -> None:
    quotas = ConnectionQuotas(ConnectionLimits(max_connections=1, creation_rate=5), ["PLAINTEXT"])
    quotas.open("PLAINTEXT", "a")
    for _ in range(50):
        quotas.throttle_ms("PLAINTEXT", 0)
    quotas.update(ConnectionLimits(max_connections=2, creation_rate=10))
    assert quotas.total == 1 and quotas.slot_available("PLAINTEXT")
    assert quotas.broker_rate is not None and quotas.broker_rate.limit == 10
    assert quotas.throttle_ms("PLAINTEXT", 0) == 0  # 51 in 10 s: within 10/s
    quotas.update(ConnectionLimits())
    assert quotas.broker_rate is None and quotas.throttle_ms("PLAINTEXT", 0) == 0
