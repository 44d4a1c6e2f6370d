"""`gregor acls`: add, remove and list ACLs, as Apache Kafka's `kafka-acls.sh` does (same
option names, same output lines), over CreateAcls / DeleteAcls / DescribeAcls.

    gregor acls --bootstrap-server HOST:PORT --add --allow-principal User:alice
                [--allow-host H] [--deny-principal P] [--deny-host H] --operation Read
                (--topic T | --group G | --transactional-id I | --cluster) ...
                [--resource-pattern-type LITERAL|PREFIXED]
    gregor acls ... --add --allow-principal User:alice --producer --topic T
                [--transactional-id I] [--idempotent]
    gregor acls ... --add --allow-principal User:alice --consumer --topic T --group G
    gregor acls ... --remove [principals, hosts, operations] RESOURCES [--force]
    gregor acls ... --list [RESOURCES] [--principal P] [--resource-pattern-type ANY|MATCH|...]

Without `--operation` an ACL is for All; without a host for `*`. `--remove` without
principals removes every ACL of the resources, after a y/n question unless `--force`.
Errors are one line on stderr and exit code 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TextIO

from broker.security.acl import CLUSTER_NAME, AclOperation, PatternType, Permission, ResourceType
from broker.tools.admin_port import AdminPort
from broker.tools.common import Subcommands, ToolError, add_connection_args, call, run_command

ACTIONS = ("add", "remove", "list")
OPERATION_NAMES = {op.name.replace("_", "").lower(): op for op in AclOperation if op > AclOperation.ANY}


@dataclass(frozen=True)
class Resource:
    kind: ResourceType
    name: str

    def text(self, pattern: PatternType) -> str:
        return f"ResourcePattern(resourceType={self.kind.name}, name={self.name}, patternType={pattern.name})"


@dataclass(frozen=True)
class Entry:
    principal: str
    host: str
    operation: AclOperation
    permission: Permission

    def text(self) -> str:
        return (f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
                f"permissionType={self.permission.name})")


# -- what the options ask for ---------------------------------------------------------------


def _operation(name: str) -> AclOperation:
    found = OPERATION_NAMES.get(name.replace("_", "").replace("-", "").lower())
    if found is None:
        raise ToolError(f"invalid operation '{name}'; one of: {', '.join(sorted(OPERATION_NAMES))}")
    return found


def _pattern(args: argparse.Namespace, default: PatternType) -> PatternType:
    if args.resource_pattern_type is None:
        return default
    try:
        return PatternType[args.resource_pattern_type.upper()]
    except KeyError:
        raise ToolError(f"invalid --resource-pattern-type '{args.resource_pattern_type}'") from None


def resources(args: argparse.Namespace) -> list[Resource]:
    found = [Resource(ResourceType.TOPIC, t) for t in args.topic]
    found += [Resource(ResourceType.GROUP, g) for g in args.group]
    found += [Resource(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    if args.cluster or (args.producer and args.idempotent):
        found.append(Resource(ResourceType.CLUSTER, CLUSTER_NAME))
    return found


def _shortcut_operations(args: argparse.Namespace, resource: Resource) -> list[AclOperation]:
    """kafka-acls.sh's --producer and --consumer: the operations each needs on each resource."""
    ops: list[AclOperation] = []
    if args.producer:
        ops += {
            ResourceType.TOPIC: [AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE],
            ResourceType.TRANSACTIONAL_ID: [AclOperation.WRITE, AclOperation.DESCRIBE],
            ResourceType.CLUSTER: [AclOperation.IDEMPOTENT_WRITE],
        }.get(resource.kind, [])
    if args.consumer:
        ops += {
            ResourceType.TOPIC: [AclOperation.READ, AclOperation.DESCRIBE],
            ResourceType.GROUP: [AclOperation.READ],
        }.get(resource.kind, [])
    return list(dict.fromkeys(ops))


def _operations(args: argparse.Namespace, resource: Resource) -> list[AclOperation]:
    if args.producer or args.consumer:
        return _shortcut_operations(args, resource)
    return [_operation(o) for o in args.operation] or [AclOperation.ALL]


def entries(args: argparse.Namespace, resource: Resource) -> list[Entry]:
    """Every (principal, host, operation, permission) the options name for `resource`."""
    found = []
    for permission, principals, hosts in (
        (Permission.ALLOW, args.allow_principal, args.allow_host),
        (Permission.DENY, args.deny_principal, args.deny_host),
    ):
        for principal in principals:
            if ":" not in principal:
                raise ToolError(f"principal '{principal}' is not of the form Type:name (User:alice)")
            for host in hosts or ["*"]:
                found += [Entry(principal, host, op, permission) for op in _operations(args, resource)]
    return found


def _check(args: argparse.Namespace) -> None:
    actions = [a for a in ACTIONS if getattr(args, a)]
    if len(actions) != 1:
        raise ToolError("give exactly one of --add, --remove, --list")
    if args.consumer and args.add and not args.group:
        raise ToolError("--consumer needs --group")
    if (args.producer or args.consumer) and not args.add:
        raise ToolError("--producer and --consumer go with --add")
    if (args.producer or args.consumer) and args.operation:
        raise ToolError("--operation does not go with --producer or --consumer")
    if not args.list and not resources(args):
        raise ToolError("name a resource: --topic, --group, --transactional-id or --cluster")
    if args.add and not (args.allow_principal or args.deny_principal):
        raise ToolError("--add needs --allow-principal or --deny-principal")


# -- over the wire ----------------------------------------------------------------------------


def _kafka_acl(resource: Resource, pattern: PatternType, entry: Entry) -> object:
    """A kafka.admin.ACL (passed through to the admin client)."""
    from kafka.admin import ACL, ACLOperation, ACLPermissionType, ACLResourcePatternType, ResourcePattern
    from kafka.admin import ResourceType as KType

    return ACL(
        principal=entry.principal, host=entry.host, operation=ACLOperation(entry.operation),
        permission_type=ACLPermissionType(entry.permission),
        resource_pattern=ResourcePattern(
            KType(resource.kind), resource.name, ACLResourcePatternType(pattern)
        ),
    )


def _kafka_filter(
    kind: ResourceType, name: str | None, pattern: PatternType, entry: Entry | None = None,
    principal: str | None = None,
) -> object:
    """A kafka.admin.ACLFilter (passed through to the admin client)."""
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KType

    return ACLFilter(
        principal=entry.principal if entry else principal, host=entry.host if entry else None,
        operation=ACLOperation(entry.operation if entry else AclOperation.ANY),
        permission_type=ACLPermissionType(entry.permission if entry else Permission.ANY),
        resource_pattern=ResourcePatternFilter(KType(kind), name, ACLResourcePatternType(pattern)),
    )


def _described(admin: AdminPort, acl_filter: object) -> dict[tuple[Resource, PatternType], list[Entry]]:
    acls, _ = call("Error while listing ACLs", lambda: admin.describe_acls(acl_filter))
    found: dict[tuple[Resource, PatternType], list[Entry]] = {}
    for acl in acls:
        p = acl.resource_pattern
        key = (Resource(ResourceType(p.resource_type), p.resource_name), PatternType(p.pattern_type))
        found.setdefault(key, []).append(Entry(
            acl.principal, acl.host, AclOperation(acl.operation), Permission(acl.permission_type)
        ))
    return found


def _print_current(out: TextIO, found: dict[tuple[Resource, PatternType], list[Entry]]) -> None:
    for (resource, pattern), listed in sorted(found.items(), key=lambda kv: (kv[0][0].kind, kv[0][0].name)):
        out.write(f"Current ACLs for resource `{resource.text(pattern)}`: \n")
        for entry in sorted(listed, key=Entry.text):
            out.write(f" \t{entry.text()} \n")
        out.write("\n")


def _add(admin: AdminPort, args: argparse.Namespace, out: TextIO) -> None:
    pattern = _pattern(args, PatternType.LITERAL)
    for resource in resources(args):
        wanted = entries(args, resource)
        if not wanted:
            continue
        out.write(f"Adding ACLs for resource `{resource.text(pattern)}`: \n")
        for entry in wanted:
            out.write(f" \t{entry.text()} \n")
        out.write("\n")
        acls = [_kafka_acl(resource, pattern, e) for e in wanted]
        result = call("Error while adding ACLs", lambda: admin.create_acls(acls))  # noqa: B023
        if result["failed"]:
            raise ToolError(f"Error while adding ACLs: {type(result['failed'][0]()).__name__}")
    _list(admin, args, out)


def _confirmed(question: str, args: argparse.Namespace) -> bool:
    if args.force:
        return True
    print(f"{question} (y/n)", flush=True)
    return sys.stdin.readline().strip().lower() == "y"


def _removal(resource: Resource, pattern: PatternType, wanted: list[Entry]) -> tuple[str, list[object]]:
    """kafka-acls.sh's question and the delete filters for one resource."""
    shown = f"`{resource.text(pattern)}`"
    if not wanted:
        question = f"Are you sure you want to delete all ACLs for resource filter {shown}?"
        return question, [_kafka_filter(resource.kind, resource.name, pattern)]
    listed = "".join(f" \t{e.text()} \n" for e in wanted)
    question = f"Are you sure you want to remove ACLs: \n{listed} from resource filter {shown}?"
    return question, [_kafka_filter(resource.kind, resource.name, pattern, e) for e in wanted]


def _delete(admin: AdminPort, filters: list[object]) -> None:
    results = call("Error while removing ACLs", lambda: admin.delete_acls(filters))
    for _, _, error in results:
        if getattr(error, "errno", 0):
            raise ToolError(f"Error while removing ACLs: {error.__name__}")


def _remove(admin: AdminPort, args: argparse.Namespace, out: TextIO) -> None:
    pattern = _pattern(args, PatternType.LITERAL)
    for resource in resources(args):
        question, filters = _removal(resource, pattern, entries(args, resource))
        if _confirmed(question, args):
            _delete(admin, filters)
    _list(admin, args, out)


def _list(admin: AdminPort, args: argparse.Namespace, out: TextIO) -> None:
    pattern = _pattern(args, PatternType.ANY)
    principals: Iterable[str | None] = args.principal or [None]
    wanted = resources(args)
    filters: list[tuple[ResourceType, str | None]] = [(r.kind, r.name) for r in wanted]
    filters = filters or [(ResourceType.ANY, None)]
    for kind, name in filters:
        for principal in principals:
            found = _described(admin, _kafka_filter(kind, name, pattern, principal=principal))
            _print_current(out, found)


COMMANDS = {"add": _add, "remove": _remove, "list": _list}


def _command(admin: AdminPort, args: argparse.Namespace, out: TextIO) -> None:
    action = next(a for a in ACTIONS if getattr(args, a))
    COMMANDS[action](admin, args, out)


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser("acls", help="add, remove and list ACLs (kafka-acls.sh)")
    add_connection_args(p)
    for action in ACTIONS:
        p.add_argument(f"--{action}", action="store_true")
    for option in ("allow-principal", "deny-principal", "allow-host", "deny-host", "operation", "topic",
                   "group", "transactional-id", "principal"):
        p.add_argument(f"--{option}", action="append", default=[])
    p.add_argument("--cluster", action="store_true", help="the cluster resource (kafka-cluster)")
    p.add_argument("--resource-pattern-type", help="LITERAL or PREFIXED (--list: also ANY, MATCH)")
    p.add_argument("--producer", action="store_true", help="the ACLs a producer needs")
    p.add_argument("--consumer", action="store_true", help="the ACLs a consumer needs")
    p.add_argument("--idempotent", action="store_true",
                   help="with --producer: IdempotentWrite on the cluster")
    p.add_argument("--force", action="store_true", help="remove without asking")


def run(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    try:
        _check(args)
    except ToolError as exc:
        print(f"gregor acls: {exc}", file=err)
        return 1
    return run_command("acls", "gregor-acls", _command, args, out, err)
