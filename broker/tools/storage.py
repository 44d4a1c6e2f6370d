"""`gregor storage format`: SCRAM credentials stored before a broker's first start, as Kafka's
`kafka-storage format --add-scram` bootstraps the first SASL users:

    gregor storage format --config broker.yaml \\
        --add-scram 'SCRAM-SHA-512=[name=admin,password=admin-secret]' \\
        --add-scram 'SCRAM-SHA-256=[name=alice,password=alice-secret,iterations=8192]'

The credentials go where the broker keeps its metadata: the first data dir's metadata file on
one broker (run it before the broker starts), etcd in a cluster. Only the salted form is stored.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
from pathlib import Path

from broker.config import BrokerConfig, ConfigError, load_config
from broker.security.scram import MIN_ITERATIONS, ScramCredential, ScramMechanism, credential_problem
from broker.tools.common import Subcommands

_SPEC = re.compile(r"\s*([A-Za-z0-9-]+)\s*=\s*\[(.*)\]\s*")
Entry = tuple[ScramMechanism, str, ScramCredential]


class FormatError(Exception):
    """A bad --add-scram or an unusable store: one line on stderr, exit code 1."""


def add_parser(sub: Subcommands) -> None:
    storage = sub.add_parser("storage", help="prepare a broker's metadata before its first start")
    actions = storage.add_subparsers(dest="action", required=True)
    fmt = actions.add_parser("format", help="store SCRAM credentials (as kafka-storage format --add-scram)")
    fmt.add_argument("--config", required=True, type=Path, help="the broker's YAML config file")
    fmt.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    fmt.add_argument("--add-scram", action="append", default=[], metavar="MECHANISM=[name=N,password=P]",
                     help="a SCRAM credential (repeatable); also iterations=N")


def parse_scram(spec: str) -> Entry:
    """`SCRAM-SHA-512=[name=admin,password=secret,iterations=8192]` (quotes around values allowed)."""
    m = _SPEC.fullmatch(spec)
    if m is None:
        raise FormatError(f"--add-scram {spec!r}: expected MECHANISM=[name=...,password=...]")
    mechanism = ScramMechanism.named(m.group(1))
    fields = dict(_field(part, spec) for part in m.group(2).split(",") if part.strip())
    if "name" not in fields or "password" not in fields:
        raise FormatError(f"--add-scram {spec!r}: name and password are required")
    iterations = int(fields.get("iterations", MIN_ITERATIONS))
    if (problem := credential_problem(mechanism, iterations)) is not None:
        raise FormatError(f"--add-scram {spec!r}: {problem}")
    assert mechanism is not None
    credential = ScramCredential.from_password(mechanism, fields["password"], os.urandom(32), iterations)
    return mechanism, fields["name"], credential


def _field(part: str, spec: str) -> tuple[str, str]:
    key, sep, value = part.partition("=")
    if not sep or key.strip() not in ("name", "password", "iterations"):
        raise FormatError(f"--add-scram {spec!r}: {part.strip()!r} is not name=, password= or iterations=")
    return key.strip(), value.strip().strip('"')


def _store_locally(config: BrokerConfig, entries: list[Entry]) -> str:
    from broker.security.scram_store import local_credentials
    from broker.store.local_store import LocalMetadataStore

    directory = config.log_dirs[0]
    directory.mkdir(parents=True, exist_ok=True)
    credentials = local_credentials(LocalMetadataStore(directory))
    asyncio.run(credentials.alter({(m, user): c for m, user, c in entries}, []))
    return str(directory)


async def _store_in_etcd(config: BrokerConfig, entries: list[Entry]) -> str:
    from broker.store.address import EtcdAddress
    from broker.store.etcd_store import EtcdMetadataStore

    store = EtcdMetadataStore(EtcdAddress.parse(config.metadata_store))
    await store.open(attempts=config.metadata_store_connect_attempts)
    try:
        await store.put_scram({f"{m.mechanism_name}/{user}": c.to_json() for m, user, c in entries}, [])
    finally:
        await store.close()
    return config.metadata_store


def run(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config, args.override)
        entries = [parse_scram(spec) for spec in args.add_scram]
        if not entries:
            raise FormatError("nothing to format: give --add-scram")
        clustered = config.metadata_store != "local"
        where = asyncio.run(_store_in_etcd(config, entries)) if clustered else _store_locally(config, entries)
    except (ConfigError, FormatError, OSError) as exc:
        print(f"gregor storage format: {exc}", file=sys.stderr)
        return 1
    for mechanism, user, _ in entries:
        print(f"Stored {mechanism.mechanism_name} credential for {user} in {where}")
    return 0
