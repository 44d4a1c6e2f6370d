"""`gregor groups`: list, describe, reset offsets of and delete consumer groups, as
Apache Kafka's `kafka-consumer-groups.sh` does (same option names and columns).

    gregor groups --bootstrap-server HOST:PORT --list [--state]
    gregor groups --bootstrap-server HOST:PORT --describe (--group G ... | --all-groups)
                  [--offsets | --members | --state]
    gregor groups --bootstrap-server HOST:PORT --reset-offsets (--group G | --all-groups)
                  (--topic T[:P,P] ... | --all-topics)
                  (--to-earliest | --to-latest | --to-current | --to-offset N | --shift-by N |
                   --to-datetime YYYY-MM-DDTHH:mm:SS.sss[+HH:MM])
                  [--dry-run | --execute]
    gregor groups --bootstrap-server HOST:PORT --delete (--group G ... | --all-groups)

`--describe` shows each partition's committed offset, log end offset and lag with the
member it is assigned to. `--reset-offsets` only plans (prints the new offsets)
unless `--execute`; new offsets are clamped to the partition's earliest..latest, and
the group must have no active members. Errors are one line on stderr, exit code 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Protocol, TextIO, cast

from broker.tools.admin_port import AdminPort, GroupInfo, MemberInfo, OffsetAndMetadata, TopicPartition
from broker.tools.common import (
    Command,
    Subcommands,
    ToolError,
    add_connection_args,
    call,
    progress,
    run_command,
)
from broker.tools.transactions import format_table
from protocol.api_keys import ApiKey
from protocol.messages import REQUESTS

ACTIONS = ("list", "describe", "reset-offsets", "delete")
OFFSETS_HEADERS = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                   "CONSUMER-ID", "HOST", "CLIENT-ID")
MEMBERS_HEADERS = ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS")
STATE_HEADERS = ("GROUP", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS")
RESET_HEADERS = ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")
INACTIVE_STATES = ("Empty", "Dead")


@dataclass(frozen=True, slots=True)
class Member:
    member_id: str
    host: str
    client_id: str


# -- pure logic ------------------------------------------------------------------------


def assignments(group: GroupInfo) -> dict[TopicPartition, Member]:
    """Which member each partition is assigned to (DescribeGroups of a consumer group)."""
    found: dict[TopicPartition, Member] = {}
    for m in group["members"]:
        member = Member(m["member_id"], m["client_host"], m["client_id"])
        assignment = m.get("member_assignment")
        for a in assignment.get("assigned_partitions", []) if assignment else []:
            for p in a["partitions"]:
                found[TopicPartition(a["topic"], p)] = member
    return found


def offset_rows(
    group_id: str, committed: Mapping[TopicPartition, int | None], log_end: Mapping[TopicPartition, int],
    owners: Mapping[TopicPartition, Member],
) -> list[list[str]]:
    rows = []
    for tp in sorted(set(committed) | set(owners)):
        current = committed.get(tp)
        end = log_end.get(tp)
        lag = "-" if current is None or end is None else str(max(end - current, 0))
        owner = owners.get(tp)
        rows.append([group_id, tp.topic, str(tp.partition), _opt(current), _opt(end), lag,
                     owner.member_id if owner else "-", owner.host if owner else "-",
                     owner.client_id if owner else "-"])
    return rows


def _opt(value: int | None) -> str:
    return "-" if value is None else str(value)


def clamp(offset: int, earliest: int, latest: int) -> int:
    return min(max(offset, earliest), latest)


@dataclass(frozen=True, slots=True)
class ResetTarget:
    """How --reset-offsets picks each partition's new offset."""

    kind: str  # earliest, latest, current, offset, shift, datetime
    value: int = 0


def new_offset(target: ResetTarget, current: int | None, earliest: int, latest: int,
               by_time: int | None = None, tp_text: str = "") -> int:
    """Kafka's ResetOffsetsCommand: the new offset of one partition, clamped to the log."""
    if target.kind == "earliest":
        return earliest
    if target.kind == "latest":
        return latest
    if target.kind == "datetime":
        return latest if by_time is None or by_time < 0 else clamp(by_time, earliest, latest)
    if target.kind == "offset":
        return clamp(target.value, earliest, latest)
    if current is None and target.kind == "shift":
        raise ToolError(f"Cannot shift offset for partition {tp_text} since there is no current "
                        "committed offset")
    if current is None:  # --to-current: the log end, as in Kafka
        return latest
    if target.kind == "shift":
        return clamp(current + target.value, earliest, latest)
    return clamp(current, earliest, latest)


def parse_datetime(text: str) -> int:
    """--to-datetime 'YYYY-MM-DDTHH:mm:SS.sss' (local time) or with an offset (+HH:MM, Z): epoch ms."""
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ToolError(f"--to-datetime must be YYYY-MM-DDTHH:mm:SS.sss, got '{text}'") from None
    return int(when.timestamp() * 1000)


def parse_topic_spec(spec: str) -> tuple[str, list[int] | None]:
    """`topic` or `topic:0,1,2`."""
    topic, sep, parts = spec.partition(":")
    if not sep:
        return topic, None
    try:
        return topic, [int(p) for p in parts.split(",") if p]
    except ValueError:
        raise ToolError(f"--topic takes TOPIC or TOPIC:PARTITION,PARTITION, got '{spec}'") from None


# -- the I/O edge ----------------------------------------------------------------------------


def _group_ids(admin: AdminPort, args: argparse.Namespace) -> list[str]:
    if args.all_groups:
        return sorted(g["group_id"] for g in call("Failed to list groups", admin.list_groups))
    if not args.group:
        raise ToolError("Option --group or --all-groups is required")
    return list(dict.fromkeys(args.group))


def _describe_group(admin: AdminPort, group_id: str) -> GroupInfo:
    """DescribeGroups; a group it does not know (Dead) may be a consumer-protocol group
    (KIP-848), which ConsumerGroupDescribe answers, as Kafka's admin client falls back."""
    described = call(f"Failed to describe group '{group_id}'", lambda: admin.describe_groups([group_id]))
    group = described[group_id]
    if group.get("error"):
        raise ToolError(f"Failed to describe group '{group_id}': {group['error']}")
    if group["group_state"] == "Dead":
        return _describe_consumer_group(admin, group_id) or group
    return group


class _AssignedTopic(Protocol):
    topic_name: str
    partitions: Sequence[int]


class _Assignment(Protocol):
    topic_partitions: Sequence[_AssignedTopic]


class _DescribedMember(Protocol):
    member_id: str
    client_host: str
    client_id: str
    assignment: _Assignment


class DescribedGroup(Protocol):
    """One group of a ConsumerGroupDescribe response: what is read of it."""

    error_code: int
    group_id: str
    group_state: str
    assignor_name: str
    members: Sequence[_DescribedMember]


class ConsumerGroupDescribed(Protocol):
    groups: Sequence[DescribedGroup]


def _describe_consumer_group(admin: AdminPort, group_id: str) -> GroupInfo | None:
    """ConsumerGroupDescribe in the shape of a DescribeGroups answer; None if not such a group."""
    async def describe() -> ConsumerGroupDescribed:
        node = await admin._find_coordinator_id(group_id)
        describe_request = REQUESTS[ApiKey.CONSUMER_GROUP_DESCRIBE]
        request = describe_request(group_ids=[group_id], include_authorized_operations=False)
        return cast(ConsumerGroupDescribed, await admin._manager.send(request, node_id=node))

    response = call(f"Failed to describe group '{group_id}'", lambda: admin._manager.run(describe))
    found = response.groups[0]
    if found.error_code != 0:
        return None
    return consumer_group_as_classic(found)


def consumer_group_as_classic(found: DescribedGroup) -> GroupInfo:
    members: list[MemberInfo] = [{
        "member_id": m.member_id, "client_host": m.client_host, "client_id": m.client_id,
        "member_assignment": {"assigned_partitions": [
            {"topic": t.topic_name, "partitions": list(t.partitions)} for t in m.assignment.topic_partitions
        ]},
    } for m in found.members]
    return {"group_id": found.group_id, "group_state": found.group_state,
            "protocol_data": found.assignor_name, "members": members}


def _committed(admin: AdminPort, group_id: str) -> dict[TopicPartition, int | None]:
    found = call(f"Failed to fetch the offsets of group '{group_id}'",
                 lambda: admin.list_group_offsets({group_id: None}))
    return {tp: (o.offset if o.offset >= 0 else None) for tp, o in found.get(group_id, {}).items()}


def _offsets(admin: AdminPort, tps: Iterable[TopicPartition], spec: int) -> dict[TopicPartition, int]:
    wanted = {tp: spec for tp in tps}
    if not wanted:
        return {}
    found = call("Failed to list the partitions' offsets", lambda: admin.list_partition_offsets(wanted))
    return {tp: o.offset for tp, o in found.items()}


def _cmd_list(admin: AdminPort, args: argparse.Namespace, out: TextIO) -> None:
    groups = sorted(call("Failed to list groups", admin.list_groups), key=lambda g: g["group_id"])
    if args.state:
        out.write(format_table(("GROUP", "STATE"), [[g["group_id"], g["group_state"]] for g in groups]))
        return
    for g in groups:
        out.write(g["group_id"] + "\n")


def _cmd_describe(admin: AdminPort, args: argparse.Namespace, out: TextIO) -> None:
    group_ids = _group_ids(admin, args)
    for done, group_id in enumerate(group_ids, 1):
        group = _describe_group(admin, group_id)
        if group["group_state"] == "Dead":
            raise ToolError(f"Consumer group '{group_id}' does not exist.")
        if args.members:
            _describe_members(group, out)
        elif args.state:
            out.write(format_table(STATE_HEADERS, [[group_id, group["protocol_data"] or "-",
                                                    group["group_state"], str(len(group["members"]))]]))
        else:
            _describe_offsets(admin, group, out)
        progress(out, done, len(group_ids), "Described groups")
        if done < len(group_ids):
            out.write("\n")


def _describe_offsets(admin: AdminPort, group: GroupInfo, out: TextIO) -> None:
    from kafka.admin import OffsetSpec

    group_id = group["group_id"]
    if not group["members"]:
        out.write(f"Consumer group '{group_id}' has no active members.\n\n")
    committed = _committed(admin, group_id)
    owners = assignments(group)
    log_end = _offsets(admin, set(committed) | set(owners), OffsetSpec.LATEST)
    out.write(format_table(OFFSETS_HEADERS, offset_rows(group_id, committed, log_end, owners)))


def _describe_members(group: GroupInfo, out: TextIO) -> None:
    owners = assignments(group)
    rows = [[group["group_id"], m["member_id"], m["client_host"], m["client_id"],
             str(sum(1 for o in owners.values() if o.member_id == m["member_id"]))]
            for m in sorted(group["members"], key=lambda m: m["member_id"])]
    if not rows:
        out.write(f"Consumer group '{group['group_id']}' has no active members.\n")
    out.write(format_table(MEMBERS_HEADERS, rows))


def _reset_target(args: argparse.Namespace) -> ResetTarget:
    if args.to_offset is not None:
        return ResetTarget("offset", args.to_offset)
    if args.shift_by is not None:
        return ResetTarget("shift", args.shift_by)
    if args.to_datetime is not None:
        return ResetTarget("datetime", parse_datetime(args.to_datetime))
    for kind in ("earliest", "latest", "current"):
        if getattr(args, f"to_{kind}"):
            return ResetTarget(kind)
    raise ToolError("--reset-offsets needs one of --to-earliest, --to-latest, --to-current, --to-offset, "
                    "--shift-by, --to-datetime")


def _partitions_to_reset(admin: AdminPort, args: argparse.Namespace,
                         committed: Mapping[TopicPartition, int | None]) -> list[TopicPartition]:
    if args.all_topics:
        return sorted(committed)
    if not args.topic:
        raise ToolError("--reset-offsets needs --topic or --all-topics")
    found: list[TopicPartition] = []
    for spec in args.topic:
        topic, partitions = parse_topic_spec(spec)
        if partitions is None:
            partitions = _topic_partitions(admin, topic)
        found.extend(TopicPartition(topic, p) for p in partitions)
    return sorted(set(found))


def _topic_partitions(admin: AdminPort, topic: str) -> list[int]:
    described = call(f"Failed to describe topic {topic}", lambda: admin.describe_topics([topic]))
    if not described or described[0]["error_code"] != 0:
        raise ToolError(f"Topic '{topic}' does not exist")
    return sorted(p["partition_index"] for p in described[0]["partitions"])


def _cmd_reset(admin: AdminPort, args: argparse.Namespace, out: TextIO) -> None:
    from kafka.admin import OffsetSpec

    if args.dry_run and args.execute:
        raise ToolError("Option --reset-offsets takes only one of --dry-run and --execute")
    target = _reset_target(args)
    group_ids = _group_ids(admin, args)
    if not args.execute and not args.dry_run:
        out.write("WARN: No action will be performed as the --execute option is missing. "
                  "In a future major release, the default behavior of this command will be to prompt the "
                  "user before executing the reset rather than doing a dry run. You should add the "
                  "--dry-run option explicitly if you are scripting this command and want to keep the "
                  "current default behavior without prompting.\n")
    for group_id in group_ids:
        state = _describe_group(admin, group_id)["group_state"]
        if state not in INACTIVE_STATES:
            raise ToolError(f"Assignments can only be reset if the group '{group_id}' is inactive, "
                            f"but the current state is {state}.")
        committed = _committed(admin, group_id)
        tps = _partitions_to_reset(admin, args, committed)
        earliest = _offsets(admin, tps, OffsetSpec.EARLIEST)
        latest = _offsets(admin, tps, OffsetSpec.LATEST)
        by_time = _offsets(admin, tps, target.value) if target.kind == "datetime" else {}
        plan = {tp: new_offset(target, committed.get(tp), earliest[tp], latest[tp], by_time.get(tp),
                               f"{tp.topic}-{tp.partition}") for tp in tps}
        if args.execute:
            _commit(admin, group_id, plan, out)
        out.write(format_table(RESET_HEADERS, [[group_id, tp.topic, str(tp.partition), str(o)]
                                               for tp, o in sorted(plan.items())]))


def _commit(admin: AdminPort, group_id: str, plan: Mapping[TopicPartition, int], out: TextIO) -> None:
    offsets = {tp: OffsetAndMetadata(o, "", -1) for tp, o in plan.items()}
    what = f"Failed to reset the offsets of group '{group_id}'"
    errors = call(what, lambda: admin.alter_group_offsets(group_id, offsets))
    failed = sorted(f"{tp.topic}-{tp.partition}: {e.__name__}" for tp, e in errors.items()
                    if getattr(e, "errno", 0) != 0)
    if failed:
        raise ToolError(f"{what}: {', '.join(failed)}")


def _cmd_delete(admin: AdminPort, args: argparse.Namespace, out: TextIO) -> None:
    group_ids = _group_ids(admin, args)
    failures = []
    for done, group_id in enumerate(group_ids, 1):
        result = call(f"Failed to delete group '{group_id}'", partial(admin.delete_groups, [group_id]))
        for gid, error in _delete_results(result):
            if error is not None:
                failures.append(f"Group '{gid}' could not be deleted due to: {error}")
        progress(out, done, len(group_ids), "Deleted groups")
    if failures:
        raise ToolError("Deletion of some consumer groups failed: " + "; ".join(failures))
    names = ", ".join(f"'{g}'" for g in group_ids)
    out.write(f"Deletion of requested consumer groups ({names}) was successful.\n")


def _delete_results(
    result: Sequence[tuple[str, object]] | Mapping[str, object],
) -> list[tuple[str, str | None]]:
    """kafka-python answers {group: error name} or [(group, error class)]; NoError is success."""
    items = result.items() if isinstance(result, Mapping) else result
    found: list[tuple[str, str | None]] = []
    for gid, error in items:
        name = error if isinstance(error, str) else getattr(error, "__name__", str(error))
        found.append((gid, None if name in ("NoError", "None", "OK") else _error_name(name)))
    return found


def _error_name(name: str) -> str:
    return {"GroupIdNotFoundError": "GroupIdNotFoundException",
            "NonEmptyGroupError": "GroupNotEmptyException"}.get(name, name)


COMMANDS: dict[str, Command] = {
    "list": _cmd_list, "describe": _cmd_describe, "reset-offsets": _cmd_reset, "delete": _cmd_delete,
}


# -- command line ---------------------------------------------------------------------------


def add_parser(subparsers: Subcommands) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "groups", help="list, describe, reset offsets of and delete consumer groups "
                       "(like kafka-consumer-groups.sh)",
        description="List, describe, reset the offsets of and delete consumer groups.",
    )
    add_connection_args(parser)
    action = parser.add_mutually_exclusive_group(required=True)
    for name in ACTIONS:
        action.add_argument(f"--{name}", dest="action", action="store_const", const=name)
    parser.add_argument("--group", action="append", default=[], help="the group (repeat for more)")
    parser.add_argument("--all-groups", action="store_true", help="every group")
    view = parser.add_mutually_exclusive_group()
    view.add_argument("--offsets", action="store_true", help="describe: offsets and lag (the default)")
    view.add_argument("--members", action="store_true", help="describe: the members")
    view.add_argument("--state", action="store_true", help="describe, list: the group state")
    parser.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P]",
                        help="reset-offsets: a topic, or some of its partitions (repeat for more)")
    parser.add_argument("--all-topics", action="store_true", help="reset-offsets: every committed topic")
    to = parser.add_mutually_exclusive_group()
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-current", action="store_true")
    to.add_argument("--to-offset", type=int, metavar="OFFSET")
    to.add_argument("--shift-by", type=int, metavar="N")
    to.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss")
    parser.add_argument("--dry-run", action="store_true", help="reset-offsets: only print the plan")
    parser.add_argument("--execute", action="store_true", help="reset-offsets: commit the new offsets")
    return parser


def run(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Run the parsed `gregor groups ...` command; the process exit code."""
    return run_command("groups", "gregor-groups", COMMANDS[args.action], args, out, err)

