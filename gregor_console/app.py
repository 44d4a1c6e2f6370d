"""`gregor console`'s process: the collector in the background, the pages on aiohttp, until
SIGINT or SIGTERM. A port in use is one line on stderr and exit code 2; an unreachable
cluster is a message on every page while the process keeps serving and trying again."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from dataclasses import dataclass

from aiohttp import web

from broker.tools.common import Security
from gregor_console.collector import Cluster, Collector
from gregor_console.web import Console, build_app

log = logging.getLogger("gregor.console")
START_UP_FAILED = 2
FIRST_READ_WAIT_S = 5.0


@dataclass(frozen=True, slots=True)
class Settings:
    bootstrap: str
    timeout_ms: int
    security: Security
    host: str
    port: int
    refresh_s: float
    history_s: float
    max_timeout_ms: int | None
    allow_abort: bool
    token: str | None
    metrics_urls: tuple[str, ...] = ()


def serve(settings: Settings) -> int:
    """Run until a signal; the process exit code."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    logging.getLogger("kafka").setLevel(logging.CRITICAL)  # its failures reach the pages instead
    try:
        return asyncio.run(_serve(settings))
    except KeyboardInterrupt:
        return 130


async def _serve(settings: Settings) -> int:
    cluster = Cluster(settings.bootstrap, settings.timeout_ms, settings.security)
    collector = Collector(cluster, settings.refresh_s, settings.history_s, settings.max_timeout_ms,
                          settings.metrics_urls)
    console = Console(collector, settings.allow_abort, token=settings.token)
    runner = web.AppRunner(build_app(console), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, settings.host, settings.port).start()
    except OSError as exc:
        await runner.cleanup()
        where = f"{settings.host}:{settings.port}"
        print(f"gregor console: cannot listen on {where}: {exc.strerror}", file=sys.stderr)
        return START_UP_FAILED
    task = asyncio.create_task(collector.run())
    try:
        await collector.first(FIRST_READ_WAIT_S)
        log.info("serving http://%s:%d/ for the cluster at %s%s", settings.host, settings.port,
                 settings.bootstrap, " (abort allowed)" if settings.allow_abort else "")
        await _until_signalled()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await runner.cleanup()
        await asyncio.to_thread(cluster.close)
    return 0


async def _until_signalled() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
