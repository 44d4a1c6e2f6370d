"""The broker's event-loop watch says when the loop ran late, and only then."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from broker.loop_watch import watch_loop


async def test_a_blocked_loop_is_logged_with_how_late_it_ran(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "broker.loop_watch")
    watch = asyncio.create_task(watch_loop(tick_s=0.05, late_s=0.3))
    await asyncio.sleep(0.2)
    assert not caplog.records  # on time: nothing said
    time.sleep(0.5)  # a step that blocks the loop
    await asyncio.sleep(0.1)
    watch.cancel()
    [record] = caplog.records
    late = float(record.getMessage().split("ran ")[1].split(" s late")[0])
    assert 0.3 <= late <= 0.6
