"""A line when the broker's event loop ran late.

Everything a broker does runs on one event loop: connections, replica fetchers, the
coordinators' loads and the keep-alive of its etcd lease. When the loop cannot run for a
while (a step that blocks it, the process paused or starved of CPU), all of them wait, and
a wait past `broker.session.timeout.ms` costs the broker its registration and every
leadership it holds. A chaos campaign (seed 101) saw leases lapse every few seconds with no
fault running and could not say why: this line says when the loop itself was late, and by
how much.
"""

from __future__ import annotations

import asyncio
import logging
import time

log = logging.getLogger(__name__)
TICK_S = 0.25
LATE_S = 1.0  # half the shortest session timeout the tests use (2 s)


async def watch_loop(tick_s: float = TICK_S, late_s: float = LATE_S) -> None:
    """Sleep `tick_s` at a time; log a warning when a wake-up comes `late_s` or more late."""
    while True:
        before = time.monotonic()
        await asyncio.sleep(tick_s)
        late = time.monotonic() - before - tick_s
        if late >= late_s:
            log.warning("the event loop ran %.1f s late: connections, replication and the etcd lease's"
                        " keep-alive all waited (the process was paused, starved of CPU, or blocked)", late)
