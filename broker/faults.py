"""Crash points for fault tests: kill -9 the broker at a chosen place.

Tests set GREGOR_CRASH_POINTS (comma-separated names, each optionally
`name:N` to crash at the N-th hit) in the broker's environment; the broker
then SIGKILLs itself when it reaches that point, exactly like `kill -9` from
outside but at a deterministic place. Unset (always, outside tests), a crash
point is a dictionary lookup.

GREGOR_FAIL_POINTS works the same way for fail points: reaching one raises
InjectedFault (a stand-in for a handler bug) instead of killing the process.
"""

from __future__ import annotations

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


_POINTS = _parse(os.environ.get("GREGOR_CRASH_POINTS", ""))
_HITS: dict[str, int] = {}


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
    if name not in _FAILS:
        return
    _HITS[name] = _HITS.get(name, 0) + 1
    if _HITS[name] >= _FAILS[name]:
        raise InjectedFault(f"fail point {name} reached")
