"""`gregor` command line:

    gregor broker --config FILE [--override key=value ...] [--log-level LEVEL]
    gregor transactions --bootstrap-server HOST:PORT list|describe|describe-producers|find-hanging|abort
    gregor dump [--print-data] [--decode-internal] [--json] PATH ...
    gregor topics --bootstrap-server HOST:PORT --create|--list|--describe|--alter|--delete ...
    gregor groups --bootstrap-server HOST:PORT --list|--describe|--reset-offsets|--delete ...
    gregor acls --bootstrap-server HOST:PORT --add|--remove|--list ...
    gregor configs --bootstrap-server HOST:PORT --entity-type users --describe|--alter ...
    gregor storage format --config FILE [--add-scram 'SCRAM-SHA-512=[name=...,password=...]']
    gregor config-docs [--doc docs/configuration.md]
    gregor console --bootstrap-server HOST:PORT [--port N] [--allow-abort]
    gregor --version

A mistake of the user (configuration, busy port, a data dir in use) ends start-up
with one line on stderr and exit code 2, never a traceback."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING

from broker.tools import acls as acls_tool
from broker.tools import configs as configs_tool
from broker.tools import console as console_tool
from broker.tools import dump as dump_tool
from broker.tools import groups as groups_tool
from broker.tools import storage as storage_tool
from broker.tools import topics as topics_tool
from broker.tools import transactions as transactions_tool

if TYPE_CHECKING:
    from broker.cluster.membership import ClusterMembership
    from broker.config import BrokerConfig

# The broker's own modules are imported where they are used, so the tools start quickly.

# `gregor <command>` for each tool: the parsed arguments in, the exit code out.
TOOLS: dict[str, Callable[[argparse.Namespace], int]] = {
    "transactions": transactions_tool.run,
    "dump": dump_tool.run,
    "topics": topics_tool.run,
    "groups": groups_tool.run,
    "acls": acls_tool.run,
    "configs": configs_tool.run,
    "storage": storage_tool.run,
    "console": console_tool.run,
}

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
START_UP_FAILED = 2


def gregor_version() -> str:
    try:
        return version("gregor")
    except PackageNotFoundError:
        return "unknown"


def _log_level(text: str) -> str:
    level = text.strip().upper()
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"unknown log level {text!r} (choose from {', '.join(LOG_LEVELS)})")
    return level


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gregor", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"gregor {gregor_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    broker = sub.add_parser("broker", help="run a broker")
    broker.add_argument("--config", required=True, type=Path, help="YAML config file")
    broker.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE",
        help="set a config key, overriding the file (repeatable)",
    )
    broker.add_argument("--log-level", default="INFO", type=_log_level, metavar="LEVEL",
                        help=f"one of {', '.join(LOG_LEVELS)} (default INFO)")
    docs = sub.add_parser("config-docs", help="print the table of configuration keys (Markdown)")
    docs.add_argument("--doc", type=Path, help="rewrite the key table inside this Markdown page instead")
    transactions_tool.add_parser(sub)
    dump_tool.add_parser(sub)
    topics_tool.add_parser(sub)
    groups_tool.add_parser(sub)
    acls_tool.add_parser(sub)
    configs_tool.add_parser(sub)
    storage_tool.add_parser(sub)
    console_tool.add_parser(sub)
    return parser


async def _run_broker(config_path: Path, overrides: list[str]) -> None:
    from broker.config import load_config
    from broker.server import Broker

    config = load_config(config_path, overrides)
    cluster = await _join_cluster(config)
    try:
        broker = Broker(config, cluster)
        await broker.start()
    except BaseException:
        if cluster is not None:  # its etcd session and tasks must not outlive a failed start
            await cluster.close()
        raise
    await broker.run_until_stopped()


async def _join_cluster(config: BrokerConfig) -> ClusterMembership | None:
    """With `metadata.store: etcd://...`: the cluster id from etcd, before the data dir opens."""
    from broker.cluster.controller import LeaderBalancing
    from broker.cluster.membership import ClusterMembership
    from broker.security.client import inter_broker_security

    if config.metadata_store == "local":
        return None
    security = inter_broker_security(config)  # the controller channel's connections
    return await ClusterMembership.join(
        config.metadata_store, config.node_id, config.cluster_id,
        config.broker_session_timeout_ms, config.metadata_store_connect_attempts,
        LeaderBalancing(
            config.auto_leader_rebalance_enable, config.leader_imbalance_check_interval_seconds
        ),
        security,
    )


def _config_docs(page: Path | None) -> int:
    from broker.config import config_docs, with_config_docs

    if page is None:
        sys.stdout.write(config_docs())
        return 0
    page.write_text(with_config_docs(page.read_text()))
    return 0


def _start_up_error(exc: Exception) -> str | None:
    """The one line to print for an expected start-up failure; None for a bug."""
    from broker.cluster.membership import ClusterIdMismatch
    from broker.config import ConfigError
    from broker.front.listeners import ListenerError
    from broker.store.etcd_store import NodeIdInUse, StoreUnavailable
    from storage.dir_lock import LogDirLockedError, LogDirUnusableError
    from storage.log_manager import InconsistentMetaPropertiesError

    if isinstance(exc, ConfigError):
        return f"configuration error: {exc}"
    if isinstance(exc, InconsistentMetaPropertiesError):
        return f"the data directory belongs to another broker: {exc}"
    if isinstance(exc, (LogDirLockedError, LogDirUnusableError, ListenerError)):
        return f"cannot start: {exc}"
    if isinstance(exc, (StoreUnavailable, NodeIdInUse, ClusterIdMismatch)):
        return f"cannot join the cluster: {exc}"
    return None


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    tool = TOOLS.get(args.command)
    if tool is not None:
        return tool(args)
    if args.command == "config-docs":
        return _config_docs(args.doc)
    logging.basicConfig(
        level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    import uvloop

    from broker.base.faults import install_crash_point_file

    install_crash_point_file()
    try:
        uvloop.run(_run_broker(args.config, args.override))
    except KeyboardInterrupt:
        print("gregor: interrupted during start-up", file=sys.stderr)
        return 130
    except Exception as exc:
        message = _start_up_error(exc)
        if message is None:
            raise
        print(f"gregor: {message}", file=sys.stderr)
        return START_UP_FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main())
