"""Wall-clock milliseconds, Kafka's `time.milliseconds()`: the one clock the broker reads."""

import time


def now_ms() -> int:
    return int(time.time() * 1000)
