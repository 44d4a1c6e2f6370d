"""The broker's clocks. `now_ms`: wall-clock milliseconds, Kafka's `time.milliseconds()`, for
timestamps and for what Kafka times on the wall clock (transaction timeouts). `steady_ms`: the
same scale, read from the wall clock once at start-up and advanced since by the monotonic
clock, so that a step of the realtime clock (an NTP step, a host set minutes wrong) moves no
deadline kept in it: the group coordinator's session, join and sync deadlines, which Kafka
keeps on its timer wheel (System.nanoTime)."""

import time

_WALL_AT_START = time.time()
_MONOTONIC_AT_START = time.monotonic()


def now_ms() -> int:
    return int(time.time() * 1000)


def steady_ms() -> int:
    return int((_WALL_AT_START + time.monotonic() - _MONOTONIC_AT_START) * 1000)
