"""The test harness's `free_port`: a module fixture asks for several ports before any broker
listens, so the kernel handing back a port it just released must not give two brokers one."""

from __future__ import annotations

import pytest

from tests.integration.harness import free_port


def test_free_port_never_hands_out_a_port_twice() -> None:
    ports = [free_port() for _ in range(3000)]  # ~28k ephemeral ports: repeats certain without the set
    assert len(set(ports)) == len(ports)


def test_free_port_of_an_xdist_worker_is_its_share(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    for worker, remainder in (("gw0", 0), ("gw1", 1)):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        assert {free_port() // 2 % 2 for _ in range(200)} == {remainder}
