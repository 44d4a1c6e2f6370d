"""What the admin tools (`gregor topics`, `gregor groups`) share: the admin client,
one-line errors and `k=v` options. They talk to the broker through kafka-python's
`KafkaAdminClient`, as `gregor transactions` does; admin requests may go to any
broker of a cluster (they are forwarded)."""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TextIO, TypeAlias, TypeVar

from kafka.errors import KafkaError, for_code

if TYPE_CHECKING:
    from broker.tools.admin_port import AdminPort

T = TypeVar("T")
RETRY_FOR_S = 15.0
RETRY_BACKOFF_S = 0.2

Command = Callable[["AdminPort", argparse.Namespace, TextIO], None]

# What `add_subparsers` returns: each tool adds its command (and theirs) to it
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


class ToolError(Exception):
    """An expected failure: printed as one line on stderr, exit code 1."""


def add_connection_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                        help="broker(s) to connect to, comma-separated")
    parser.add_argument("--timeout-ms", type=int, default=30_000, help="request and connect timeout")
    parser.add_argument("--command-config", metavar="FILE",
                        help="Kafka client properties (security.protocol, sasl.mechanism, "
                             "sasl.jaas.config, ssl.truststore.location, ...), as Kafka's tools take")


def run_command(label: str, client_id: str, command: Command, args: argparse.Namespace,
                out: TextIO, err: TextIO) -> int:
    """Connect, run one command, close; a ToolError is one line `gregor <label>: ...` on
    stderr and exit code 1. The process exit code."""
    try:
        security = client_security(args.command_config) if args.command_config else {}
        admin = connect(args.bootstrap_server, args.timeout_ms, client_id, security)
        try:
            command(admin, args, out)
        finally:
            admin.close()
    except ToolError as exc:
        out.flush()
        print(f"gregor {label}: {exc}", file=err)
        return 1
    return 0


# kafka-python's client settings: names to strings, and ssl_check_hostname to a bool
Security = dict[str, str | bool | None]


def connect(bootstrap: str, timeout_ms: int, client_id: str, security: Security | None = None) -> AdminPort:
    from kafka.admin import KafkaAdminClient

    try:
        admin: AdminPort = KafkaAdminClient(
            bootstrap_servers=bootstrap.split(","), client_id=client_id,
            request_timeout_ms=timeout_ms, bootstrap_timeout_ms=timeout_ms, **(security or {}),
        )
        return admin
    except KafkaError as exc:
        raise ToolError(f"cannot connect to {bootstrap}: {describe_error(exc)}") from exc


_PROPERTY = re.compile(r"([^=:\s]+)\s*[=:\s]?\s*(.*)")


def read_properties(path: str) -> dict[str, str]:
    """A Java .properties file's `key=value` (or `key: value`) lines; `#`/`!` comments,
    lines continued with a trailing backslash."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ToolError(f"cannot read --command-config {path}: {exc.strerror}") from None
    props: dict[str, str] = {}
    for line in re.sub(r"\\\n\s*", "", text).splitlines():
        line = line.strip()
        if line and line[0] not in "#!":
            key, value = _PROPERTY.fullmatch(line).groups()  # type: ignore[union-attr]
            props[key] = value
    return props


def client_security(path: str) -> Security:
    """Kafka client security properties as kafka-python's client settings."""
    from broker.security.jaas import JaasError, parse_jaas

    props = read_properties(path)
    settings: Security = {}
    if "security.protocol" in props:
        settings["security_protocol"] = props["security.protocol"].upper()
    if "sasl.mechanism" in props:
        settings["sasl_mechanism"] = props["sasl.mechanism"].upper()
    if "sasl.jaas.config" in props:
        try:
            options = parse_jaas(props["sasl.jaas.config"]).options
        except JaasError as exc:
            raise ToolError(f"--command-config {path}: sasl.jaas.config: {exc}") from None
        settings["sasl_plain_username"] = options.get("username")
        settings["sasl_plain_password"] = options.get("password")
    for key in ("ssl.truststore.type", "ssl.keystore.type"):
        if props.get(key, "PEM").upper() != "PEM":
            raise ToolError(f"--command-config {path}: {key}: only PEM files are read")
    if "ssl.truststore.location" in props:
        settings["ssl_cafile"] = props["ssl.truststore.location"]
    if "ssl.keystore.location" in props:  # key and certificate chain in one PEM file
        settings["ssl_certfile"] = settings["ssl_keyfile"] = props["ssl.keystore.location"]
    if props.get("ssl.key.password"):
        settings["ssl_password"] = props["ssl.key.password"]
    if props.get("ssl.endpoint.identification.algorithm", "https") == "":
        settings["ssl_check_hostname"] = False
    return settings


def describe_error(exc: BaseException) -> str:
    """The error's name and, when the broker sent one, its message (not the whole request)."""
    if isinstance(exc, KafkaError) and getattr(exc, "errno", None) is not None:
        return type(exc).__name__
    text = str(exc)
    return text.split(": Request ")[0] if text else type(exc).__name__


def call(what: str, fn: Callable[[], T], retry_for_s: float = RETRY_FOR_S) -> T:
    """`fn()`; a retriable error (a coordinator loading, a leader moving) is retried for a
    while, as Kafka's admin client does; any other is a ToolError saying `what` failed."""
    deadline = time.monotonic() + retry_for_s
    while True:
        try:
            return fn()
        except KafkaError as exc:
            if not getattr(exc, "retriable", False) or time.monotonic() >= deadline:
                raise ToolError(f"{what}: {describe_error(exc)}") from exc
        except ValueError as exc:  # kafka-python checks some arguments itself
            raise ToolError(f"{what}: {exc}") from exc
        time.sleep(RETRY_BACKOFF_S)


def check(code: int, message: str | None, what: str) -> None:
    """A wire error code of one resource in a response: a ToolError unless it is 0."""
    if code != 0:
        name = for_code(code).__name__
        raise ToolError(f"{what}: {message or name}" + (f" ({name})" if message else ""))


def key_values(pairs: Iterable[str], option: str) -> dict[str, str]:
    """`k=v` options (`--config retention.ms=1000`)."""
    found: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ToolError(f"{option} takes key=value, got '{pair}'")
        found[key.strip()] = value.strip()
    return found


def matching(pattern: str | None, names: Iterable[str]) -> list[str]:
    """Names the `--topic`/`--group` pattern matches, as a whole (Kafka takes a regex there)."""
    if pattern is None:
        return sorted(names)
    try:
        regex = re.compile(pattern)
    except re.error:
        return [n for n in names if n == pattern]
    return sorted(n for n in names if n == pattern or regex.fullmatch(n))


def progress(out: TextIO, done: int, total: int, what: str) -> None:
    """One progress line for long operations (every tenth, and the last)."""
    if total >= 20 and (done % max(total // 10, 1) == 0 or done == total):
        out.write(f"{what}: {done}/{total}\n")
        out.flush()
