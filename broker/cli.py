"""`gregor` command line: `gregor broker --config FILE [--override key=value ...]` and
`gregor transactions --bootstrap-server HOST:PORT list|describe|describe-producers|find-hanging|abort`."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import uvloop

from broker.config import ConfigError, load_config
from broker.tools import transactions as transactions_tool
from storage.dir_lock import LogDirLockedError, LogDirUnusableError
from storage.log_manager import InconsistentMetaPropertiesError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gregor", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    broker = sub.add_parser("broker", help="run a broker")
    broker.add_argument("--config", required=True, type=Path, help="YAML config file")
    broker.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE",
        help="set a config key, overriding the file (repeatable)",
    )
    broker.add_argument("--log-level", default="INFO")
    transactions_tool.add_parser(sub)
    return parser


async def _run_broker(config_path: Path, overrides: list[str]) -> None:
    from broker.server import Broker

    config = load_config(config_path, overrides)
    broker = Broker(config)
    await broker.start()
    await broker.run_until_stopped()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "transactions":
        return transactions_tool.run(args)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        uvloop.run(_run_broker(args.config, args.override))
    except ConfigError as exc:
        print(f"gregor: configuration error: {exc}", file=sys.stderr)
        return 2
    except LogDirLockedError as exc:
        print(f"gregor: cannot start: {exc}", file=sys.stderr)
        return 2
    except LogDirUnusableError as exc:
        print(f"gregor: cannot start: {exc}", file=sys.stderr)
        return 2
    except InconsistentMetaPropertiesError as exc:
        print(f"gregor: the data directory belongs to another broker: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
