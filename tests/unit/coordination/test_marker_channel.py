"""A transaction's markers wait for a partition without a leader; the wait is logged while
it lasts (chaos seed 95 waited 90 minutes without a line) and ends when a leader appears."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

import pytest

from broker.cluster.view import BrokerInfo
from broker.coordination import marker_channel
from broker.coordination.marker_channel import MarkerChannel
from coordinator.transaction.machine import MarkerIntent

ME = BrokerInfo(1, "127.0.0.1", 9092, None)


def intent() -> MarkerIntent:
    return MarkerIntent("tx-a", 7, 0, True, 1, frozenset({("t", 0), ("t", 1)}), 2)


async def written(request: Any) -> Any:
    """The local writer's answer: every partition of the one marker written."""
    topics = [SimpleNamespace(name=t.name, partitions=[SimpleNamespace(partition_index=i, error_code=0)
                                                      for i in t.partition_indexes])
              for t in request.markers[0].topics]
    return SimpleNamespace(markers=[SimpleNamespace(topics=topics)])


async def test_markers_waiting_for_a_leader_are_logged_until_it_appears(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(marker_channel, "STILL_WAITING_LOG_S", 0.2)
    monkeypatch.setattr(marker_channel, "RETRY_BACKOFF_S", 0.01)
    leaders: dict[tuple[str, int], BrokerInfo] = {("t", 0): ME}
    done = asyncio.Event()
    channel = MarkerChannel(1, lambda t, p: leaders.get((t, p)), written, lambda _: done.set())
    with caplog.at_level(logging.WARNING, logger=marker_channel.__name__):
        channel.send(intent())
        await asyncio.sleep(0.5)
        assert not done.is_set()
        waiting = [r.getMessage() for r in caplog.records]
        assert waiting and all("t-1 (LEADER_NOT_AVAILABLE)" in m and "t-0" not in m for m in waiting), waiting
        assert len(waiting) <= 3, waiting  # once per STILL_WAITING_LOG_S, not once per retry
        leaders[("t", 1)] = ME
        await asyncio.wait_for(done.wait(), 2)
