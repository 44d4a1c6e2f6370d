"""Crash points for fault tests: kill -9 the broker at a chosen place.

Tests set GREGOR_CRASH_POINTS (comma-separated names, each optionally
`name:N` to crash at the N-th hit) in the broker's environment; the broker
then SIGKILLs itself when it reaches that point, exactly like `kill -9` from
outside but at a deterministic place. Unset (always, outside tests), a crash
point is a dictionary lookup.

GREGOR_FAIL_POINTS works the same way for fail points: reaching one raises
InjectedFault (a stand-in for a handler bug) instead of killing the process.

GREGOR_CRASH_POINTS_FILE names a file a test writes later: on SIGUSR1 the broker
arms the crash points it lists (same syntax), so a test can choose the broker
that must die (say, the current coordinator of a transactional id) while the
cluster runs.
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


def install_crash_point_file() -> None:
    """Tests only: SIGUSR1 arms the crash points in $GREGOR_CRASH_POINTS_FILE."""
    path = os.environ.get("GREGOR_CRASH_POINTS_FILE")
    if not path:
        return

    def arm(_signum: int, _frame: object) -> None:
        try:
            with open(path) as f:
                points = _parse(f.read())
        except OSError as exc:
            log.warning("crash points file %s: %s", path, exc)
            return
        _POINTS.clear()
        _POINTS.update(points)
        _HITS.clear()
        log.warning("crash points armed: %s", ",".join(f"{k}:{v}" for k, v in points.items()) or "none")

    signal.signal(signal.SIGUSR1, arm)


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
