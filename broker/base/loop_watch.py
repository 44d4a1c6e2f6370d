"""A line when the broker's event loop ran late, saying where it was held.

Everything a broker does runs on one event loop: connections, replica fetchers, the
coordinators' loads and the keep-alive of its etcd lease. When the loop cannot run for a
while (a step that blocks it, the process paused or starved of CPU), all of them wait, and
a wait past `broker.session.timeout.ms` costs the broker its registration and every
leadership it holds. A chaos campaign (seed 101) saw leases lapse every few seconds with no
fault running and could not say why (seed 102 showed it: other processes starved the brokers
of CPU).

The watch sleeps a tick at a time on the loop and says how late each wake-up came. A
sentinel thread beside it looks at the loop's thread whenever a tick is overdue and keeps
where it found it: in a step of the broker's own (the file, line and function, innermost
last), or idle in its selector (nothing to run). When the sentinel itself woke as late, the
process as a whole did not run, and it says that instead.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from pathlib import Path
from types import FrameType

log = logging.getLogger(__name__)
TICK_S = 0.25
LATE_S = 1.0  # half the shortest session timeout the tests use (2 s)
ROOT = Path(__file__).resolve().parents[2]
SHOWN_FRAMES = 4  # the innermost frames of the broker's own code
# The sentinel looks at least once while a wait of `late_s` lasts, if it runs at all.
NOT_SEEN = ("the sentinel thread could not run meanwhile either (the process was paused or starved of CPU,"
            " or a call held the GIL)")


async def watch_loop(tick_s: float = TICK_S, late_s: float = LATE_S) -> None:
    """Sleep `tick_s` at a time; log a warning when a wake-up comes `late_s` or more late,
    with where the sentinel found the loop meanwhile."""
    sentinel = Sentinel(threading.get_ident(), tick_s, late_s)
    sentinel.start()
    try:
        while True:
            before = time.monotonic()
            sentinel.beat(before)
            await asyncio.sleep(tick_s)
            late = time.monotonic() - before - tick_s
            if late >= late_s:
                log.warning("the event loop ran %.1f s late: connections, replication and the etcd lease's"
                            " keep-alive all waited; %s", late, sentinel.take() or NOT_SEEN)
    finally:
        sentinel.stop()


class Sentinel(threading.Thread):
    """Looks at the loop's thread each `tick_s` and, the first time in an episode that its
    last beat is `late_s` old, keeps where that thread was (one owner: `take` clears it)."""

    def __init__(self, loop_thread: int, tick_s: float, late_s: float) -> None:
        super().__init__(name="loop-sentinel", daemon=True)
        self._loop_thread, self._tick_s, self._late_s = loop_thread, tick_s, late_s
        self._beat = time.monotonic()
        self._seen: str | None = None
        self._stopped = threading.Event()

    def beat(self, at: float) -> None:
        self._beat = at

    def take(self) -> str | None:
        seen, self._seen = self._seen, None
        return seen

    def stop(self) -> None:
        self._stopped.set()

    def run(self) -> None:
        last = time.monotonic()
        while not self._stopped.wait(self._tick_s):
            woke = time.monotonic()
            own_late, last = woke - last - self._tick_s, woke
            if self._seen is None and woke - self._beat >= self._late_s:
                self._seen = self._look(own_late)

    def _look(self, own_late: float) -> str | None:
        """Where the loop's thread is; or, when this thread could not run either, that the
        process as a whole did not (its stack then shows where the loop went on, not why)."""
        if own_late >= self._late_s / 2:
            return (f"the sentinel thread could not run either for {own_late:.1f} s (the process was paused"
                    " or starved of CPU, or a call held the GIL)")
        frame = sys._current_frames().get(self._loop_thread)
        return None if frame is None else where(frame)


def where(frame: FrameType) -> str:
    """Where a thread is, from its innermost frame: idle in a selector, or the innermost
    frames of the broker's own code."""
    stack = traceback.extract_stack(frame)
    if stack and Path(stack[-1].filename).name == "selectors.py":
        return "it was idle in its selector (the process was paused or starved of CPU)"
    own = [f for f in stack if _own(f.filename)][-SHOWN_FRAMES:]
    shown = own or stack[-SHOWN_FRAMES:]
    steps = " > ".join(f"{_short(f.filename)}:{f.lineno} {f.name}" for f in shown)
    return f"it was held in {steps}"


def _own(filename: str) -> bool:
    path = Path(filename).resolve()  # not "<frozen runpy>", which resolves into the cwd
    return path.is_relative_to(ROOT) and "site-packages" not in path.parts and path.is_file()


def _short(filename: str) -> str:
    return str(Path(filename).resolve().relative_to(ROOT)) if _own(filename) else Path(filename).name
