"""The broker's event-loop watch says when the loop ran late, and only then, and where the loop
was held: in a step of the broker's own, or idle in its selector (the process paused or starved)."""

from __future__ import annotations

import asyncio
import logging
import selectors
import socket
import sys
import threading
import time

import pytest

from broker.base.loop_watch import watch_loop, where


def a_step_that_blocks_the_loop(seconds: float) -> None:
    time.sleep(seconds)


async def test_a_blocked_loop_is_logged_with_how_late_and_where(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "broker.base.loop_watch")
    watch = asyncio.create_task(watch_loop(tick_s=0.05, late_s=0.8))
    await asyncio.sleep(0.2)
    assert not caplog.records  # on time: nothing said
    a_step_that_blocks_the_loop(1.2)
    await asyncio.sleep(0.1)
    watch.cancel()
    [record] = caplog.records
    message = record.getMessage()
    late = float(message.split("ran ")[1].split(" s late")[0])
    assert 0.8 <= late <= 1.3
    assert "it was held in tests/unit/test_loop_watch.py:" in message
    assert message.endswith("a_step_that_blocks_the_loop")  # innermost last


async def test_a_process_that_did_not_run_is_told_apart(caplog: pytest.LogCaptureFixture) -> None:
    """While one thread keeps the GIL (as when the process is not scheduled at all), the
    sentinel cannot look either; the line says so rather than where the loop went on."""
    caplog.set_level(logging.WARNING, "broker.base.loop_watch")
    watch = asyncio.create_task(watch_loop(tick_s=0.05, late_s=0.3))
    await asyncio.sleep(0.2)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(5.0)  # no other thread runs until this one blocks
    try:
        deadline = time.monotonic() + 0.6
        while time.monotonic() < deadline:
            pass
    finally:
        sys.setswitchinterval(interval)
    await asyncio.sleep(0.1)
    watch.cancel()
    [record] = caplog.records
    assert "the sentinel thread could not run" in record.getMessage()


def test_a_thread_waiting_in_its_selector_is_idle() -> None:
    left, right = socket.socketpair()
    with left, right, selectors.DefaultSelector() as selector:
        selector.register(left, selectors.EVENT_READ)
        waiting = threading.Thread(target=selector.select, args=(5,), daemon=True)
        waiting.start()
        time.sleep(0.1)
        assert waiting.ident is not None
        seen = where(sys._current_frames()[waiting.ident])
        right.send(b"x")
        waiting.join()
    assert seen.startswith("it was idle in its selector")
