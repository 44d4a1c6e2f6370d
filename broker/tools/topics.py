"""`gregor topics`: create, list, describe, alter and delete topics, as Apache Kafka's
`kafka-topics.sh` does (same option names and output lines).

    gregor topics --bootstrap-server HOST:PORT --create --topic T [--partitions N]
                  [--replication-factor R] [--config k=v ...] [--if-not-exists]
    gregor topics --bootstrap-server HOST:PORT --list [--topic REGEX] [--exclude-internal]
    gregor topics --bootstrap-server HOST:PORT --describe [--topic REGEX] [--exclude-internal]
                  [--under-replicated-partitions | --unavailable-partitions]
    gregor topics --bootstrap-server HOST:PORT --alter --topic T [--partitions N]
                  [--config k=v ...] [--delete-config k ...]
    gregor topics --bootstrap-server HOST:PORT --delete --topic REGEX [--if-exists]

`--describe` shows each topic's id, partition count, replication factor and the
configs set on it, then one line per partition with its leader, replicas and ISR
(from Metadata, so it shows a cluster's placement). `--alter --config` changes
topic configs (IncrementalAlterConfigs; kafka-configs.sh's job in Kafka).
Errors are one line on stderr and exit code 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from functools import partial
from typing import TextIO

from broker.tools.admin_port import AdminPort, PartitionInfo, TopicInfo
from broker.tools.common import (
    Command,
    Subcommands,
    ToolError,
    add_connection_args,
    call,
    check,
    key_values,
    matching,
    progress,
    run_command,
)

ACTIONS = ("create", "list", "describe", "alter", "delete")


# -- output lines ----------------------------------------------------------------------


def _nodes(ids: Sequence[int]) -> str:
    return ",".join(str(i) for i in ids)


def topic_line(topic: TopicInfo, configs: dict[str, str | None]) -> str:
    partitions = topic["partitions"]
    rf = len(partitions[0]["replica_nodes"]) if partitions else 0
    shown = ",".join(f"{k}={v}" for k, v in sorted(configs.items()))
    return (f"Topic: {topic['name']}\tTopicId: {topic.get('topic_id')}\tPartitionCount: {len(partitions)}\t"
            f"ReplicationFactor: {rf}\tConfigs: {shown}")


def partition_line(topic: str, p: PartitionInfo) -> str:
    leader = "none" if p["leader_id"] < 0 else str(p["leader_id"])
    line = (f"\tTopic: {topic}\tPartition: {p['partition_index']}\tLeader: {leader}\t"
            f"Replicas: {_nodes(p['replica_nodes'])}\tIsr: {_nodes(p['isr_nodes'])}")
    if p.get("offline_replicas"):
        line += f"\tOffline: {_nodes(p['offline_replicas'])}"
    return line


def under_replicated(p: PartitionInfo) -> bool:
    return len(p["isr_nodes"]) < len(p["replica_nodes"])


def unavailable(p: PartitionInfo) -> bool:
    return int(p["leader_id"]) < 0


# -- commands ---------------------------------------------------------------------------


def _topic_names(admin: AdminPort, args: argparse.Namespace) -> list[str]:
    described = call("Error while listing topics", lambda: admin.describe_topics())
    names = [t["name"] for t in described if not (args.exclude_internal and t["is_internal"])]
    return matching(args.topic, names)


def _selected(admin: AdminPort, args: argparse.Namespace) -> list[str]:
    """The topics --topic names; none is an error unless --if-exists."""
    names = _topic_names(admin, args)
    if not names and args.topic is not None and not args.if_exists:
        raise ToolError(f"Topic '{args.topic}' does not exist as expected")
    return names


def _cmd_create(admin: AdminPort, args: argparse.Namespace, out: TextIO) -> None:
    if args.topic is None:
        raise ToolError("Missing required argument \"[topic]\"")
    spec = {"num_partitions": args.partitions or -1, "replication_factor": args.replication_factor or -1,
            "configs": key_values(args.config, "--config")}
    result = call("Error while executing topic command",
                  lambda: admin.create_topics({args.topic: spec}, raise_errors=False))
    t = result["topics"][0]
    if t["error_code"] == 36 and args.if_not_exists:  # TOPIC_ALREADY_EXISTS
        return
    check(t["error_code"], t["error_message"], "Error while executing topic command")
    out.write(f"Created topic {args.topic}.\n")


def _cmd_list(admin: AdminPort, args: argparse.Namespace, out: TextIO) -> None:
    for name in _topic_names(admin, args):
        out.write(name + "\n")


def _topic_configs(admin: AdminPort, names: list[str]) -> dict[str, dict[str, str | None]]:
    from kafka.admin import ConfigResource, ConfigResourceType

    if not names:
        return {}
    resources = [ConfigResource(ConfigResourceType.TOPIC, n) for n in names]
    found = call("Error while describing topic configs", lambda: admin.describe_configs(resources))
    return {name: {k: c["value"] for k, c in entries.items() if not c.get("is_sensitive")}
            for name, entries in found.get("topic", {}).items()}


def _cmd_describe(admin: AdminPort, args: argparse.Namespace, out: TextIO) -> None:
    names = _selected(admin, args)
    topics = call("Error while describing topics", lambda: admin.describe_topics(names)) if names else []
    configs = _topic_configs(admin, names)
    filtered = args.under_replicated_partitions or args.unavailable_partitions
    for topic in sorted(topics, key=lambda t: t["name"]):
        check(topic["error_code"], None, f"Error while describing topic {topic['name']}")
        partitions = [p for p in topic["partitions"] if _shown(p, args)]
        if not filtered:
            out.write(topic_line(topic, configs.get(topic["name"], {})) + "\n")
        for p in sorted(partitions, key=lambda p: p["partition_index"]):
            out.write(partition_line(topic["name"], p) + "\n")


def _shown(p: PartitionInfo, args: argparse.Namespace) -> bool:
    if args.under_replicated_partitions:
        return under_replicated(p)
    if args.unavailable_partitions:
        return unavailable(p)
    return True


def _cmd_alter(admin: AdminPort, args: argparse.Namespace, out: TextIO) -> None:
    names = _selected(admin, args)
    if args.partitions is None and not args.config and not args.delete_config:
        raise ToolError("--alter needs --partitions, --config or --delete-config")
    for name in names:
        if args.partitions is not None:
            _add_partitions(admin, name, args.partitions)
        if args.config or args.delete_config:
            _alter_configs(admin, name, key_values(args.config, "--config"), args.delete_config)
        out.write(f"Altered topic {name}.\n")


def _add_partitions(admin: AdminPort, name: str, count: int) -> None:
    what = f"Error while altering the partition count of {name}"
    result = call(what, lambda: admin.create_partitions({name: count}, raise_errors=False))
    for r in result.results:
        check(r.error_code, r.error_message, what)


def _alter_configs(admin: AdminPort, name: str, updates: dict[str, str], deletes: list[str]) -> None:
    from kafka.admin import ConfigResource, ConfigResourceType

    ops: dict[str, tuple[str, str | None]] = {k: ("SET", v) for k, v in updates.items()}
    ops.update({k: ("DELETE", None) for k in deletes})
    resource = ConfigResource(ConfigResourceType.TOPIC, name, ops)
    what = f"Error while altering the configs of {name}"
    result = call(what, lambda: admin.alter_configs([resource], raise_on_unknown=False, incremental=True))
    outcome = result.get("topic", {}).get(name, "no answer for it")
    if outcome != "OK":  # kafka-python's "[Error 40] InvalidConfigurationError: <broker message>"
        raise ToolError(f"{what}: {outcome}")


def _cmd_delete(admin: AdminPort, args: argparse.Namespace, out: TextIO) -> None:
    if args.topic is None:
        raise ToolError("Missing required argument \"[topic]\"")
    names = _selected(admin, args)
    for done, name in enumerate(names, 1):
        result = call(f"Error while deleting topic {name}",
                      partial(admin.delete_topics, [name], raise_errors=False))
        t = result["topics"][0]
        check(t["error_code"], t.get("error_message"), f"Error while deleting topic {name}")
        out.write(f"Deleted topic {name}.\n")
        progress(out, done, len(names), "Deleted topics")


COMMANDS: dict[str, Command] = {
    "create": _cmd_create, "list": _cmd_list, "describe": _cmd_describe, "alter": _cmd_alter,
    "delete": _cmd_delete,
}


# -- command line -----------------------------------------------------------------------


def add_parser(subparsers: Subcommands) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "topics", help="create, list, describe, alter and delete topics (like kafka-topics.sh)",
        description="Create, list, describe, alter and delete topics.",
    )
    add_connection_args(parser)
    action = parser.add_mutually_exclusive_group(required=True)
    for name in ACTIONS:
        action.add_argument(f"--{name}", dest="action", action="store_const", const=name)
    parser.add_argument("--topic", help="the topic (a regular expression for list, describe, alter, delete)")
    parser.add_argument("--partitions", type=int, help="partition count (create; alter: the new count)")
    parser.add_argument("--replication-factor", type=int, help="replication factor (create)")
    parser.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                        help="a topic config (create, alter); repeat for more")
    parser.add_argument("--delete-config", action="append", default=[], metavar="KEY",
                        help="a topic config to remove (alter); repeat for more")
    parser.add_argument("--if-exists", action="store_true",
                        help="alter, describe, delete: no error if absent")
    parser.add_argument("--if-not-exists", action="store_true", help="create: no error if it exists")
    parser.add_argument("--exclude-internal", action="store_true", help="leave out internal topics")
    parser.add_argument("--under-replicated-partitions", action="store_true",
                        help="describe: only partitions whose ISR is smaller than their replicas")
    parser.add_argument("--unavailable-partitions", action="store_true",
                        help="describe: only partitions without a leader")
    return parser


def run(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Run the parsed `gregor topics ...` command; the process exit code."""
    return run_command("topics", "gregor-topics", COMMANDS[args.action], args, out, err)
