"""What every corpus module shares: the versions Gregor advertises, and the parametrised test."""

from __future__ import annotations

from typing import Any

from tests.differential.runner import advertised


def versions(api_key: int) -> range:
    low, high = advertised()[api_key]
    return range(low, high + 1)


def capped(api_key: int, index: int) -> int:
    """Version `index` of `api_key`, or its highest when `index` is beyond it."""
    low, high = advertised()[api_key]
    return max(low, min(index, high))


Cases = dict[str, list[Any]]
