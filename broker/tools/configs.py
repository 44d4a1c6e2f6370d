"""`gregor configs` for users' SCRAM credentials, as Apache Kafka's `kafka-configs.sh` manages
them (same options, same output lines), over AlterUserScramCredentials /
DescribeUserScramCredentials (KIP-554):

    gregor configs --bootstrap-server HOST:PORT [--command-config FILE] --entity-type users
        --entity-name alice --alter
        --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=x]'
    gregor configs ... --entity-type users --entity-name alice --alter --delete-config SCRAM-SHA-512
    gregor configs ... --entity-type users [--entity-name alice] --describe

Iterations default to 4096 as in kafka-configs.sh. Errors are one line on stderr, exit code 1.
Other entity types (topics, brokers, quotas) are not served by this tool yet.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import TextIO

from broker.tools.admin_port import AdminPort
from broker.tools.common import Subcommands, ToolError, add_connection_args, call, run_command

DEFAULT_ITERATIONS = 4096
MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
_ITEM = re.compile(r"\s*(SCRAM-SHA-256|SCRAM-SHA-512)\s*=\s*\[([^\]]*)\]\s*(?:,|$)")


def parse_add_config(text: str) -> list[tuple[str, str, int]]:
    """`SCRAM-SHA-256=[iterations=8192,password=x],...` as (mechanism, password, iterations)."""
    found: list[tuple[str, str, int]] = []
    pos = 0
    while pos < len(text):
        m = _ITEM.match(text, pos)
        if m is None:
            raise ToolError(f"--add-config {text!r}: expected SCRAM-SHA-256=[password=...] or "
                            "SCRAM-SHA-512=[iterations=N,password=...], comma-separated")
        fields = dict(_field(part, text) for part in m.group(2).split(",") if part.strip())
        if "password" not in fields:
            raise ToolError(f"--add-config {text!r}: {m.group(1)} needs password=")
        try:
            iterations = int(fields.get("iterations", DEFAULT_ITERATIONS))
        except ValueError:
            raise ToolError(f"--add-config {text!r}: iterations must be a number") from None
        found.append((m.group(1), fields["password"], iterations))
        pos = m.end()
    if not found:
        raise ToolError("--add-config: nothing to add")
    return found


def _field(part: str, text: str) -> tuple[str, str]:
    key, sep, value = part.partition("=")
    if not sep or key.strip() not in ("password", "iterations"):
        raise ToolError(f"--add-config {text!r}: {part.strip()!r} is not password= or iterations=")
    return key.strip(), value.strip().strip('"')


def _alter(admin: AdminPort, args: argparse.Namespace, out: TextIO) -> None:
    from kafka.admin import UserScramCredentialDeletion, UserScramCredentialUpsertion

    user = args.entity_name
    changes: list[object] = [UserScramCredentialDeletion(user, m) for m in _deleted(args.delete_config)]
    for mechanism, password, iterations in parse_add_config(args.add_config) if args.add_config else []:
        changes.append(UserScramCredentialUpsertion(user, mechanism, password, iterations=iterations))
    for change in changes:  # one request each: the broker refuses a user altered twice in one
        results = _altered(admin, user, change)
        if (error := results.get(user)) is not None:
            raise ToolError(f"Error while executing config command for user {user}: {error}")
    print(f"Completed updating config for user {user}.", file=out)


def _altered(admin: AdminPort, user: str, change: object) -> dict[str, str | None]:
    return call(f"Error while executing config command for user {user}",
                lambda: admin.alter_user_scram_credentials([change]))


def _deleted(names: list[str]) -> list[str]:
    mechanisms = [n.strip().upper() for item in names for n in item.split(",") if n.strip()]
    if (unknown := [m for m in mechanisms if m not in MECHANISMS]):
        raise ToolError(f"--delete-config {', '.join(unknown)}: only {', '.join(MECHANISMS)} for users")
    return mechanisms


def _describe(admin: AdminPort, args: argparse.Namespace, out: TextIO) -> None:
    users = [args.entity_name] if args.entity_name else None
    found = call("Error while describing users", lambda: admin.describe_user_scram_credentials(users))
    for user, described in found.items():
        if described["error"] is not None:
            if users is None:
                continue
            raise ToolError(f"user {user}: {described['error']}")
        infos = ", ".join(f"{info['mechanism'].name.replace('_', '-')}=iterations={info['iterations']}"
                          for info in described["credential_infos"])
        print(f"SCRAM credential configs for user-principal '{user}' are {infos}", file=out)


def _command(admin: AdminPort, args: argparse.Namespace, out: TextIO) -> None:
    (_alter if args.alter else _describe)(admin, args, out)


def _check(args: argparse.Namespace) -> None:
    if args.entity_type != "users":
        raise ToolError(f"--entity-type {args.entity_type}: only users (SCRAM credentials) so far")
    if args.alter == args.describe:
        raise ToolError("exactly one of --alter and --describe")
    if args.alter and not args.entity_name:
        raise ToolError("--alter needs --entity-name")
    if args.alter and not (args.add_config or args.delete_config):
        raise ToolError("--alter needs --add-config or --delete-config")


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser("configs", help="users' SCRAM credentials (kafka-configs.sh)")
    add_connection_args(p)
    p.add_argument("--entity-type", required=True, help="users")
    p.add_argument("--entity-name", help="the user")
    p.add_argument("--alter", action="store_true")
    p.add_argument("--describe", action="store_true")
    p.add_argument("--add-config", help="SCRAM-SHA-256=[iterations=N,password=...],SCRAM-SHA-512=[...]")
    p.add_argument("--delete-config", action="append", default=[], help="SCRAM-SHA-256 or SCRAM-SHA-512")


def run(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    try:
        _check(args)
    except ToolError as exc:
        print(f"gregor configs: {exc}", file=err)
        return 1
    return run_command("configs", "gregor-configs", _command, args, out, err)
