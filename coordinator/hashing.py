"""Java's ``String.hashCode`` and Kafka's ``Utils.abs``: which coordinator partition owns a key.

Both coordinators place a key (``transactional.id``, ``group.id``) on partition
``Utils.abs(key.hashCode()) % partitions`` of their internal topic. ``hashCode``
runs over UTF-16 code units with 32-bit overflow; ``Utils.abs`` maps
``Integer.MIN_VALUE`` to 0 where ``Math.abs`` would return it unchanged.
"""

from __future__ import annotations

from functools import lru_cache

_INT_MIN = -(1 << 31)
_MASK = 0xFFFFFFFF


def java_string_hash(value: str) -> int:
    """``value.hashCode()`` as a signed 32-bit int (characters outside the BMP count as two units)."""
    units = value.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & _MASK
    return h - (1 << 32) if h & 0x80000000 else h


def java_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: like ``Math.abs`` but ``Integer.MIN_VALUE`` maps to 0."""
    return 0 if n == _INT_MIN else abs(n)


@lru_cache(maxsize=65536)
def coordinator_partition(key: str, num_partitions: int) -> int:
    """Partition of ``__transaction_state`` / ``__consumer_offsets`` that owns ``key`` (asked
    several times per request: remembered for the most recent keys)."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return java_abs(java_string_hash(key)) % num_partitions
