"""Crash points for fault tests: kill -9 the broker at a chosen place.

Tests set GREGOR_CRASH_POINTS (comma-separated names, each optionally
`name:N` to crash at the N-th hit) in the broker's environment; the broker
then SIGKILLs itself when it reaches that point, exactly like `kill -9` from
outside but at a deterministic place. Unset (always, outside tests), a crash
point is a dictionary lookup.

GREGOR_FAIL_POINTS works the same way for fail points: reaching one raises
InjectedFault (a stand-in for a handler bug) instead of killing the process; reaching a
lost-answer point raises ConnectionResetError, as a request carried out whose answer never
came back (etcd applied a write, and the connection dropped before its reply).

GREGOR_CRASH_POINTS_FILE names a file a test writes later: on SIGUSR1 the broker
arms the crash points it lists (same syntax), so a test can choose the broker
that must die (say, the current coordinator of a transactional id) while the
cluster runs. An item `name@SECONDS` (in the file or in GREGOR_CRASH_POINTS) arms
a slow point instead: each time the broker reaches it, it waits that long there
(a partition slow to load, a slow transaction log write), without holding up
anything else.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal

log = logging.getLogger(__name__)


def _parse(text: str) -> dict[str, int]:
    points: dict[str, int] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        name, _, count = item.partition(":")
        points[name] = int(count or 1)
    return points


_POINTS: dict[str, int] = {}
_SLOW: dict[str, float] = {}
_HITS: dict[str, int] = {}


def _arm(text: str) -> None:
    points = _parse(text)
    _POINTS.clear()
    _POINTS.update({k: v for k, v in points.items() if "@" not in k})
    _SLOW.clear()
    _SLOW.update({k.split("@")[0]: float(k.split("@")[1]) for k in points if "@" in k})
    _HITS.clear()


_arm(os.environ.get("GREGOR_CRASH_POINTS", ""))


def install_crash_point_file() -> None:
    """Tests only: SIGUSR1 arms the crash points in $GREGOR_CRASH_POINTS_FILE."""
    path = os.environ.get("GREGOR_CRASH_POINTS_FILE")
    if not path:
        return

    def arm(_signum: int, _frame: object) -> None:
        try:
            with open(path) as f:
                _arm(f.read())
        except OSError as exc:
            log.warning("crash points file %s: %s", path, exc)
            return
        armed = [f"{k}:{v}" for k, v in _POINTS.items()] + [f"{k}@{v:g}" for k, v in _SLOW.items()]
        log.warning("crash points armed: %s", ",".join(armed) or "none")

    signal.signal(signal.SIGUSR1, arm)


async def slow_point(name: str) -> None:
    """Tests only: wait here as long as the armed `name@SECONDS` says (not at all unarmed)."""
    seconds = _SLOW.get(name)
    if seconds:
        log.warning("slow point %s reached: waiting %.1f s", name, seconds)
        await asyncio.sleep(seconds)


def crash_point(name: str) -> None:
    if name not in _POINTS:
        return
    _HITS[name] = _HITS.get(name, 0) + 1
    if _HITS[name] >= _POINTS[name]:
        log.warning("crash point %s reached: killing the broker (SIGKILL)", name)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os.kill(os.getpid(), signal.SIGKILL)


class InjectedFault(RuntimeError):
    """Raised at a fail point named in GREGOR_FAIL_POINTS (tests only)."""


_FAILS = _parse(os.environ.get("GREGOR_FAIL_POINTS", ""))


def fail_point(name: str) -> None:
    if _reached(name):
        raise InjectedFault(f"fail point {name} reached")


def lost_answer_point(name: str) -> None:
    if _reached(name):
        log.warning("lost-answer point %s reached: the answer is dropped", name)
        raise ConnectionResetError(f"lost-answer point {name} reached")


def _reached(name: str) -> bool:
    if name not in _FAILS:
        return False
    _HITS[name] = _HITS.get(name, 0) + 1
    return _HITS[name] >= _FAILS[name]
