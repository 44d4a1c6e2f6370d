"""On Gregor, more than the admin APIs tell: the transaction metrics of each broker's
Prometheus endpoint (`metrics.listener`, given with `--metrics-url`), read with each
snapshot: transactional ids by state, the oldest open transaction's age, completions,
marker failures, parked requests, the broker's own hanging-transaction check."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

PREFIX = "gregor_transaction"
SKIPPED_SUFFIXES = ("_bucket", "_created")  # a histogram's buckets, a counter's creation time
FETCH_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float


@dataclass(frozen=True, slots=True)
class BrokerMetrics:
    """One endpoint's transaction samples, or why it could not be read."""

    url: str
    samples: tuple[Sample, ...] = ()
    error: str | None = None


def transaction_samples(text: str) -> tuple[Sample, ...]:
    """The gregor_transaction* samples of a Prometheus text page (no histogram buckets)."""
    return tuple(
        Sample(s.name, tuple(sorted(s.labels.items())), float(s.value))
        for family in text_string_to_metric_families(text) if family.name.startswith(PREFIX)
        for s in family.samples if not s.name.endswith(SKIPPED_SUFFIXES)
    )


async def read_all(urls: Sequence[str]) -> list[BrokerMetrics]:
    if not urls:
        return []
    timeout = aiohttp.ClientTimeout(total=FETCH_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        return list(await asyncio.gather(*(_read(session, url) for url in urls)))


async def _read(session: aiohttp.ClientSession, url: str) -> BrokerMetrics:
    try:
        async with session.get(url) as answer:
            if answer.status != 200:
                return BrokerMetrics(url, error=f"HTTP {answer.status}")
            text = await answer.text()
    except (aiohttp.ClientError, TimeoutError) as exc:
        return BrokerMetrics(url, error=f"cannot read {url}: {exc or type(exc).__name__}")
    try:
        return BrokerMetrics(url, transaction_samples(text))
    except ValueError as exc:
        return BrokerMetrics(url, error=f"not a Prometheus page: {exc}")
