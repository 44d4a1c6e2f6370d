"""`gregor console`: the transaction console in the browser (`gregor_console/`).

    gregor console --bootstrap-server HOST:PORT [--command-config FILE] [--host H] [--port N]
                   [--token-file FILE] [--allow-abort]

Only the command line is here; the web server and its dependencies are imported when the
command runs, so the other tools and the broker never load them."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, TextIO

from broker.tools.common import Subcommands, ToolError, add_connection_args, client_security

if TYPE_CHECKING:  # the console (aiohttp, Jinja2) is loaded only when it runs
    from gregor_console.app import Settings

DEFAULT_PORT = 9080


def add_parser(subparsers: Subcommands) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "console", help="serve the transaction console in the browser",
        description="A web console of a cluster's transactions, last stable offsets and consumer "
                    "groups' lags, for Gregor and Apache Kafka alike.",
    )
    add_connection_args(parser)
    parser.add_argument("--host", default="127.0.0.1", help="address to serve on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"port to serve on (default {DEFAULT_PORT})")
    parser.add_argument("--refresh-ms", type=int, default=2000, metavar="MS",
                        help="how often the cluster is read (default 2000)")
    parser.add_argument("--history-minutes", type=float, default=10.0, metavar="MINUTES",
                        help="how far back the LSO lag charts go (default 10)")
    parser.add_argument("--max-transaction-timeout-ms", type=int, metavar="MS",
                        help="a transaction silent for longer may be hanging (default: the brokers' "
                             "transaction.max.timeout.ms)")
    parser.add_argument("--metrics-url", action="append", default=[], metavar="URL",
                        help="a Gregor broker's Prometheus endpoint (http://HOST:PORT/metrics, its "
                             "metrics.listener), for the brokers page (repeatable)")
    parser.add_argument("--allow-abort", action="store_true",
                        help="offer to abort hanging transactions (WriteTxnMarkers)")
    parser.add_argument("--token-file", metavar="FILE",
                        help="a secret every request must carry (a login page sets it as a cookie); "
                             "needed to serve on an address other than loopback")
    parser.add_argument("--no-login", action="store_true",
                        help="serve on another address without a token all the same (a container whose "
                             "port is published on the host's loopback only)")
    return parser


def run(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Serve until interrupted; the process exit code."""
    try:
        settings = _settings(args)
    except ToolError as exc:
        print(f"gregor console: {exc}", file=err)
        return 2
    from gregor_console.app import serve

    return serve(settings)


def _settings(args: argparse.Namespace) -> Settings:
    from gregor_console.app import Settings
    from gregor_console.login import LoginError, check_exposure, read_token

    if args.refresh_ms <= 0 or args.history_minutes <= 0:
        raise ToolError("--refresh-ms and --history-minutes must be positive")
    if args.max_transaction_timeout_ms is not None and args.max_transaction_timeout_ms < 0:
        raise ToolError("--max-transaction-timeout-ms must not be negative")
    security = client_security(args.command_config) if args.command_config else {}
    try:
        token = read_token(args.token_file) if args.token_file else None
        check_exposure(args.host, token, args.no_login)
    except LoginError as exc:
        raise ToolError(str(exc)) from None
    return Settings(
        args.bootstrap_server, args.timeout_ms, security, args.host, args.port, args.refresh_ms / 1000,
        args.history_minutes * 60, args.max_transaction_timeout_ms, args.allow_abort, token,
        tuple(args.metrics_url),
    )
