"""`gregor transactions`: inspect transactions and abort hanging ones (KIP-664).

Mirrors Apache Kafka's `kafka-transactions.sh`: the same sub-commands, option
names and table columns, driven through kafka-python's `KafkaAdminClient`.

    gregor transactions --bootstrap-server HOST:PORT list
    gregor transactions --bootstrap-server HOST:PORT describe --transactional-id ID
    gregor transactions --bootstrap-server HOST:PORT describe-producers --topic T --partition P
    gregor transactions --bootstrap-server HOST:PORT find-hanging (--broker-id N | --topic T [--partition P])
    gregor transactions --bootstrap-server HOST:PORT abort --topic T --partition P --start-offset O

A transaction is *hanging* when a partition leader holds an open transaction
(DescribeProducers shows a current transaction start offset) that has been
silent for longer than the maximum transaction timeout, and no coordinator
will ever finish it: no transactional id owns the producer id, or the owner's
current transaction does not include that partition. Its first offset pins
the partition's last stable offset, so read_committed consumers stop there
until `abort` writes an ABORT marker for it.

The selection rules are the coordinator's (`coordinator/transaction/hanging.py`); the table
printer is pure; the `_cmd_*` functions are the I/O edge.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import partial
from typing import TextIO, TypeVar

from kafka.errors import KafkaError, TransactionalIdNotFoundError, for_code

from broker.tools.admin_port import (
    AbortSpec,
    AdminPort,
    PartitionProducers,
    TopicPartition,
    TransactionDescriptionView,
    TransactionListingView,
)
from broker.tools.common import Command, Subcommands, ToolError, add_connection_args, run_command
from coordinator.transaction.hanging import OpenTransaction, candidate_open_transactions, hanging_transactions
from protocol.types import Offset, ProducerEpoch, ProducerId

MAX_BATCH_SIZE = 500  # partitions / topics per DescribeProducers / Metadata request, as in Kafka
DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN = 15  # Kafka's transaction.max.timeout.ms, in minutes
MS_PER_MINUTE = 60_000

LIST_HEADERS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADERS = (
    "CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
    "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions",
)
PRODUCERS_HEADERS = (
    "ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
    "CurrentTransactionStartOffset",
)
HANGING_HEADERS = (
    "Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
    "LastTimestamp", "Duration(min)",
)

T = TypeVar("T")


# -- pure logic ------------------------------------------------------------------


def format_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Left-aligned columns as wide as their widest cell, separated by two spaces."""
    all_rows = [list(headers), *[list(r) for r in rows]]
    widths = [max(len(r[i]) for r in all_rows) for i in range(len(headers))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in all_rows]
    return "\n".join(lines) + "\n"


def open_transactions(states: Mapping[TopicPartition, PartitionProducers]) -> list[OpenTransaction]:
    """Every producer with a current transaction start offset, by partition (from
    kafka-python's `describe_producers` result)."""
    found = []
    for tp, state in states.items():
        for p in state.active_producers:
            if p.current_transaction_start_offset >= 0:
                found.append(OpenTransaction(
                    tp.topic, tp.partition, ProducerId(p.producer_id), ProducerEpoch(p.producer_epoch),
                    p.coordinator_epoch, Offset(p.current_transaction_start_offset), p.last_timestamp,
                ))
    return sorted(found, key=lambda t: (t.topic, t.partition, t.start_offset))


def list_rows(listings_by_broker: Mapping[int, Iterable[TransactionListingView]]) -> list[list[str]]:
    rows = [
        [t.transactional_id, str(broker_id), str(t.producer_id), _state(t.state)]
        for broker_id, listings in listings_by_broker.items()
        for t in listings
    ]
    return sorted(rows)


def describe_row(transactional_id: str, d: TransactionDescriptionView, now_ms: int) -> list[str]:
    started = d.transaction_start_time_ms
    partitions = ",".join(f"{tp.topic}-{tp.partition}" for tp in sorted(d.topic_partitions))
    return [
        str(d.coordinator_id), transactional_id, str(d.producer_id), str(d.producer_epoch),
        _state(d.state), str(d.transaction_timeout_ms),
        str(started) if started >= 0 else "None",
        str(now_ms - started) if started >= 0 else "None",
        partitions,
    ]


def producer_rows(state: PartitionProducers) -> list[list[str]]:
    return [
        [
            str(p.producer_id), str(p.producer_epoch), str(p.coordinator_epoch), str(p.last_sequence),
            str(p.last_timestamp),
            str(p.current_transaction_start_offset) if p.current_transaction_start_offset >= 0 else "None",
        ]
        for p in state.active_producers
    ]


def hanging_rows(hanging: Iterable[OpenTransaction], now_ms: int) -> list[list[str]]:
    return [
        [
            t.topic, str(t.partition), str(t.producer_id), str(t.producer_epoch), str(t.coordinator_epoch),
            str(t.start_offset), str(t.last_timestamp), str((now_ms - t.last_timestamp) // MS_PER_MINUTE),
        ]
        for t in hanging
    ]


def _state(state: object) -> str:
    return str(getattr(state, "value", state))


def _batches(items: Sequence[T], size: int = MAX_BATCH_SIZE) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


# -- the I/O edge -------------------------------------------------------------------


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return text if text else type(exc).__name__


def _call(what: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except KafkaError as exc:
        raise ToolError(f"{what}: {_describe(exc)}") from exc


def _now_ms() -> int:
    return int(time.time() * 1000)


def _cmd_list(admin: AdminPort, args: argparse.Namespace, out: TextIO) -> None:
    listings = _call("Failed to list transactions", admin.list_transactions)
    out.write(format_table(LIST_HEADERS, list_rows(listings)))


def _cmd_describe(admin: AdminPort, args: argparse.Namespace, out: TextIO) -> None:
    txn_id = args.transactional_id
    what = f"Failed to describe transaction state of transactional-id `{txn_id}`"
    descriptions = _call(what, lambda: admin.describe_transactions([txn_id]))
    if txn_id not in descriptions:
        raise ToolError(f"{what}: no answer for it")
    out.write(format_table(DESCRIBE_HEADERS, [describe_row(txn_id, descriptions[txn_id], _now_ms())]))


def _cmd_describe_producers(admin: AdminPort, args: argparse.Namespace, out: TextIO) -> None:
    tp = TopicPartition(args.topic, args.partition)
    where = f"broker {args.broker_id}" if args.broker_id is not None else "leader"
    what = f"Failed to describe producers for partition {tp.topic}-{tp.partition} on {where}"
    states = _call(what, lambda: admin.describe_producers([tp], broker_id=args.broker_id))
    out.write(format_table(PRODUCERS_HEADERS, producer_rows(states[tp])))


def _partitions_to_search(admin: AdminPort, args: argparse.Namespace) -> list[TopicPartition]:
    if args.topic is not None and args.partition is not None:
        return [TopicPartition(args.topic, args.partition)]
    topics = [args.topic] if args.topic is not None else _call("Failed to list topics", admin.list_topics)
    found = []
    for batch in _batches(sorted(topics)):
        described = _call(f"Failed to describe {len(batch)} topics", partial(admin.describe_topics, batch))
        for topic in described:
            if topic["error_code"] != 0:
                error = for_code(topic["error_code"])
                raise ToolError(f"Failed to describe topic {topic['name']}: {error.__name__}")
            for p in topic["partitions"]:
                if args.broker_id is None or args.broker_id in p["replica_nodes"]:
                    found.append(TopicPartition(topic["name"], p["partition_index"]))
    return found


def _open_transactions(
    admin: AdminPort, args: argparse.Namespace, tps: list[TopicPartition]
) -> list[OpenTransaction]:
    found = []
    for batch in _batches(tps):
        what = f"Failed to describe producers for {len(batch)} partitions"
        states = _call(what, partial(admin.describe_producers, batch, broker_id=args.broker_id))
        found.extend(open_transactions(states))
    return found


def _transactional_ids(admin: AdminPort, producer_ids: set[ProducerId]) -> dict[ProducerId, str]:
    what = f"Failed to list transactions for {len(producer_ids)} producers"
    by_broker = _call(what, lambda: admin.list_transactions(producer_id_filters=sorted(producer_ids)))
    return {
        ProducerId(t.producer_id): t.transactional_id
        for listings in by_broker.values() for t in listings if t.producer_id in producer_ids
    }


def _partitions_of(
    admin: AdminPort, transactional_ids: Iterable[str],
) -> dict[str, set[TopicPartition] | None]:
    """Each id's current transaction's partitions, None for an id its coordinator lacks."""
    found: dict[str, set[TopicPartition] | None] = {}
    for txn_id in sorted(set(transactional_ids)):
        try:
            description = admin.describe_transactions([txn_id]).get(txn_id)
            found[txn_id] = None if description is None else set(description.topic_partitions)
        except TransactionalIdNotFoundError:
            found[txn_id] = None
        except KafkaError as exc:
            raise ToolError(f"Failed to describe transactional-id `{txn_id}`: {_describe(exc)}") from exc
    return found


def _cmd_find_hanging(admin: AdminPort, args: argparse.Namespace, out: TextIO) -> None:
    if args.topic is None and args.broker_id is None:
        raise ToolError("The `find-hanging` command requires either --topic or --broker-id "
                        "to limit the scope of the search")
    if args.partition is not None and args.topic is None:
        raise ToolError("The --partition argument requires --topic to be provided")
    if args.max_transaction_timeout < 0:
        raise ToolError("--max-transaction-timeout must not be negative")
    found = _open_transactions(admin, args, _partitions_to_search(admin, args))
    now = _now_ms()
    candidates = candidate_open_transactions(found, now, args.max_transaction_timeout * MS_PER_MINUTE)
    hanging: list[OpenTransaction] = []
    if candidates:
        txn_ids = _transactional_ids(admin, {t.producer_id for t in candidates})
        hanging = hanging_transactions(candidates, txn_ids, _partitions_of(admin, txn_ids.values()))
    out.write(format_table(HANGING_HEADERS, hanging_rows(hanging, now)))


def abort_spec_by_offset(admin: AdminPort, tp: TopicPartition, start_offset: int) -> AbortSpec:
    from kafka.admin import AbortTransactionSpec

    what = f"Failed to validate producer state for partition {tp.topic}-{tp.partition}"
    states = _call(what, lambda: admin.describe_producers([tp]))
    for txn in open_transactions(states):
        if txn.start_offset == start_offset:
            # A producer never marked has coordinator epoch -1; 0 passes any check, as in Kafka.
            epoch = max(txn.coordinator_epoch, 0)
            spec: AbortSpec = AbortTransactionSpec(tp, txn.producer_id, txn.producer_epoch, epoch)
            return spec
    raise ToolError(f"Could not find any open transactions starting at offset {start_offset} "
                    f"on partition {tp.topic}-{tp.partition}")


def _abort_spec_by_producer(tp: TopicPartition, args: argparse.Namespace) -> AbortSpec:
    from kafka.admin import AbortTransactionSpec

    if args.producer_epoch is None:
        raise ToolError("Missing required argument --producer-epoch")
    if args.coordinator_epoch is None:
        raise ToolError("Missing required argument --coordinator-epoch")
    epoch = max(args.coordinator_epoch, 0)
    spec: AbortSpec = AbortTransactionSpec(tp, args.producer_id, args.producer_epoch, epoch)
    return spec


def _cmd_abort(admin: AdminPort, args: argparse.Namespace, out: TextIO) -> None:
    tp = TopicPartition(args.topic, args.partition)
    if args.start_offset is not None:
        spec = abort_spec_by_offset(admin, tp, args.start_offset)
    elif args.producer_id is not None:
        spec = _abort_spec_by_producer(tp, args)
    else:
        raise ToolError("The transaction to abort must be identified either with --start-offset "
                        "or with --producer-id, --producer-epoch and --coordinator-epoch")
    _call(f"Failed to abort transaction {spec}", lambda: admin.abort_transaction(spec))
    out.write(f"Aborted the transaction of producer {spec.producer_id} (epoch {spec.producer_epoch}) "
              f"on {tp.topic}-{tp.partition}\n")


COMMANDS: dict[str, Command] = {
    "list": _cmd_list,
    "describe": _cmd_describe,
    "describe-producers": _cmd_describe_producers,
    "find-hanging": _cmd_find_hanging,
    "abort": _cmd_abort,
}


# -- command line -------------------------------------------------------------------


def add_parser(subparsers: Subcommands) -> argparse.ArgumentParser:
    """Add `transactions` (with its own sub-commands) to the `gregor` parser."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "transactions", help="list, describe and abort transactions (like kafka-transactions.sh)",
        description="Analyse the transactional state of producers; detect and abort hanging transactions.",
    )
    add_connection_args(parser)
    sub = parser.add_subparsers(dest="txn_command", required=True, metavar="COMMAND")
    sub.add_parser("list", help="list transactions")
    describe = sub.add_parser("describe", help="describe the state of an active transactional-id")
    describe.add_argument("--transactional-id", required=True)
    producers = sub.add_parser("describe-producers", help="describe the active producers of a partition")
    producers.add_argument("--broker-id", type=int, help="ask this replica rather than the leader")
    producers.add_argument("--topic", required=True)
    producers.add_argument("--partition", type=int, required=True)
    _add_find_hanging(sub)
    _add_abort(sub)
    return parser


def _add_find_hanging(sub: Subcommands) -> None:
    p = sub.add_parser("find-hanging", help="find hanging transactions")
    p.add_argument("--broker-id", type=int, help="broker id to search for hanging transactions")
    p.add_argument("--max-transaction-timeout", type=int, default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN,
                   metavar="MINUTES",
                   help="maximum transaction timeout in minutes to limit the scope of the search "
                        f"(default {DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN})")
    p.add_argument("--topic", help="topic name to limit the search to")
    p.add_argument("--partition", type=int, help="partition number (needs --topic)")


def _add_abort(sub: Subcommands) -> None:
    p = sub.add_parser("abort", help="abort a hanging transaction (writes an ABORT marker)")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, required=True)
    p.add_argument("--start-offset", type=int, help="start offset of the transaction to abort")
    p.add_argument("--producer-id", type=int, help="producer id (instead of --start-offset)")
    p.add_argument("--producer-epoch", type=int, help="producer epoch (with --producer-id)")
    p.add_argument("--coordinator-epoch", type=int, help="coordinator epoch (with --producer-id)")


def run(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Run the parsed `gregor transactions ...` command; the process exit code."""
    command = args.txn_command
    return run_command(f"transactions {command}", "gregor-transactions", COMMANDS[command], args, out, err)
