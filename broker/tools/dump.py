"""`gregor dump`: print what Gregor's files hold, as Apache Kafka's `kafka-dump-log.sh` does.

    gregor dump [--print-data] [--decode-internal] [--json] PATH [PATH ...]

PATH is a data dir (every partition and checkpoint in it), a partition dir, or
single files: `.log` segments (batches, with `--print-data` every record,
control records always), `.index`, `.timeindex`, `.txnindex`, `<offset>.snapshot`,
`leader-epoch-checkpoint`, the offset checkpoint files and `meta.properties`.
`--decode-internal` decodes the records of `__transaction_state` and
`__consumer_offsets` partitions (Kafka's `--transaction-log-decoder` and
`--offsets-decoder`). Lines are shaped like kafka-dump-log's; `--json` prints one
JSON document instead.

Read-only: files are opened for reading only and the data dir's lock is never
taken, so it runs beside a live broker (a batch being appended while the file is
read shows up as invalid bytes at its end). Every file is parsed with the
storage and protocol code the broker uses. A file that is not what its name
says prints one line on stderr; the exit code is then 1.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from broker.tools.common import Subcommands
from protocol import consumer_group_log, group_log, transaction_log
from protocol.internal_topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from protocol.record_batch import (
    BatchHeader,
    Compression,
    ControlType,
    CorruptBatchError,
    TimestampType,
    crc_ok,
    iter_batches,
)
from protocol.types import TopicPartition
from storage.checkpoints import (
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    META_PROPERTIES,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_CHECKPOINT,
    CorruptCheckpointError,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    parse_properties,
)
from storage.index import OFFSET_ENTRY, TIME_ENTRY, TXN_ENTRY, AbortedTxn, CorruptIndexError
from storage.log import parse_partition_dir
from storage.snapshot import SNAPSHOT_SUFFIX, CorruptSnapshotError, decode_snapshot

T = TypeVar("T")

OFFSET_CHECKPOINTS = (RECOVERY_POINT_CHECKPOINT, REPLICATION_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT)
# Order of a segment's files in a partition dir, as an operator reads them.
SUFFIX_ORDER = (".log", ".index", ".timeindex", ".txnindex", SNAPSHOT_SUFFIX)
DIR_FILES = (META_PROPERTIES, *OFFSET_CHECKPOINTS)
TXN_STATE_NAMES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
                   "CompleteAbort", "Dead", "PrepareEpochFence")

Entry = dict[str, Any]  # a JSON object of Kafka's dump output: its values are of every JSON type

if TYPE_CHECKING:
    from storage.cleaner.records import Record


class DumpError(Exception):
    """A file that cannot be read as what its name says: one line on stderr."""


@dataclass(slots=True)
class FileDump:
    """What one file holds: its entries (batches, records, index entries ...) in order,
    and the problems found (each printed on stderr)."""

    path: Path
    kind: str
    entries: list[Entry] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    trailing_bytes: int = 0


@dataclass(frozen=True, slots=True)
class Options:
    print_data: bool = False
    decode_internal: bool = False


# -- .log segments --------------------------------------------------------------------


def _timestamp_type(attributes_type: TimestampType) -> str:
    return "LogAppendTime" if attributes_type is TimestampType.LOG_APPEND_TIME else "CreateTime"


def batch_entry(data: bytes, position: int, header: BatchHeader) -> Entry:
    """Kafka's printBatchLevel fields for one v2 batch."""
    return {
        "baseOffset": header.base_offset, "lastOffset": header.last_offset, "count": header.records_count,
        "baseSequence": header.base_sequence, "lastSequence": header.last_sequence,
        "producerId": header.producer_id, "producerEpoch": header.producer_epoch,
        "partitionLeaderEpoch": header.partition_leader_epoch,
        "isTransactional": header.is_transactional, "isControl": header.is_control,
        "deleteHorizonMs": header.base_timestamp if header.has_delete_horizon else None,
        "position": position, "timestampType": _timestamp_type(header.timestamp_type),
        "maxTimestamp": header.max_timestamp, "size": header.size_in_bytes, "magic": header.magic,
        "compresscodec": Compression(header.compression).name.lower()
        if header.compression in Compression._value2member_map_ else str(header.compression),
        "crc": header.crc, "isvalid": crc_ok(data, position, header),
    }


def _decoded_batch(batch: bytes) -> Iterable[Record]:
    with warnings.catch_warnings():  # kafka-python's import-time read_text warning
        warnings.filterwarnings("ignore", "(read|open)_text", DeprecationWarning)
        from kafka.record.default_records import DefaultRecordBatch
    records: Iterable[Record] = DefaultRecordBatch(bytearray(batch))
    return records


def _text(data: bytes | None) -> str | None:
    return None if data is None else bytes(data).decode("utf-8", errors="replace")


def _size(data: bytes | None) -> int:
    return -1 if data is None else len(data)


def record_entries(batch: bytes, header: BatchHeader, topic: str | None, options: Options) -> list[Entry]:
    """Kafka's deep iteration: one entry per record of the batch."""
    out = []
    for record in _decoded_batch(batch):
        delta = record.offset - header.base_offset
        sequence = -1 if header.base_sequence < 0 else header.base_sequence + delta
        entry: Entry = {
            "offset": record.offset, "timestampType": _timestamp_type(header.timestamp_type),
            "timestamp": record.timestamp, "keySize": _size(record.key), "valueSize": _size(record.value),
            "sequence": sequence, "headerKeys": [k for k, _ in record.headers],
        }
        if header.is_control:
            entry.update(_control_fields(record.key, record.value))
        elif options.print_data or options.decode_internal:
            entry.update(_data_fields(record, topic, options))
        out.append(entry)
    return out


def _control_fields(key: bytes | None, value: bytes | None) -> Entry:
    type_id = int.from_bytes((key or b"\0\0\0\0")[2:4], "big", signed=True)
    if type_id not in (ControlType.ABORT, ControlType.COMMIT) or value is None or len(value) < 6:
        return {"controlType": f"UNKNOWN({type_id})"}
    return {"endTxnMarker": ControlType(type_id).name,
            "coordinatorEpoch": int.from_bytes(value[2:6], "big", signed=True)}


def _data_fields(record: Record, topic: str | None, options: Options) -> Entry:
    if options.decode_internal and topic == TRANSACTION_STATE_TOPIC:
        return decode_transaction_record(record.key, record.value, record.offset)
    if options.decode_internal and topic == OFFSETS_TOPIC:
        return decode_offsets_record(record.key, record.value, record.offset)
    return {"key": _text(record.key), "payload": _text(record.value)}


def dump_log(path: Path, options: Options) -> FileDump:
    dump = FileDump(path, "log")
    data = path.read_bytes()
    dump.entries.append({"logStartingOffset": _base_offset(path)})
    topic = _topic_of(path)
    try:
        for position, header in iter_batches(data):
            _dump_batch(dump, data, position, header, topic, options)
    except CorruptBatchError as exc:
        dump.trailing_bytes = len(data) - exc.position
        dump.problems.append(f"{dump.trailing_bytes} invalid bytes at the end "
                             f"(from position {exc.position}: {exc.reason})")
    return dump


def _dump_batch(dump: FileDump, data: bytes, position: int, header: BatchHeader, topic: str | None,
                options: Options) -> None:
    entry = batch_entry(data, position, header)
    dump.entries.append(entry)
    if not entry["isvalid"]:
        dump.problems.append(f"batch at position {position} (offsets {header.base_offset}-"
                             f"{header.last_offset}) fails its CRC check")
        return
    if not (options.print_data or options.decode_internal or header.is_control):
        return
    batch = data[position:position + header.size_in_bytes]
    try:
        dump.entries.extend({"record": r} for r in record_entries(batch, header, topic, options))
    except Exception as exc:  # kafka-python raises assorted errors on undecodable records
        dump.problems.append(f"records of the batch at position {position} are unreadable: "
                             f"{type(exc).__name__}: {exc}")


# -- internal topics ------------------------------------------------------------------


def decode_transaction_record(key: bytes | None, value: bytes | None, offset: int) -> Entry:
    """Kafka's TransactionLog.formatRecordKeyAndValue, as fields."""
    try:
        txn_id = transaction_log.decode_key(key or b"")
    except transaction_log.UnknownRecordVersion as exc:
        return {"key": f"unknown::version={exc.version}"}
    except transaction_log.TransactionLogDecodeError as exc:
        return {"key": f"Error at offset {offset}, skipping. {exc}"}
    decoded: Entry = {"key": f"transaction_metadata::transactionalId={txn_id}"}
    if value is None:
        return {**decoded, "payload": "<DELETE>"}
    try:
        v = transaction_log.decode_value(value)
    except transaction_log.TransactionLogDecodeError as exc:
        return {**decoded, "payload": f"Error at offset {offset}: {exc}"}
    return {**decoded, "payload": _txn_value_text(v), "transaction": _txn_value_fields(txn_id, v)}


def _txn_state(status: int) -> str:
    return TXN_STATE_NAMES[status] if 0 <= status < len(TXN_STATE_NAMES) else f"Unknown({status})"


def _txn_partitions(v: transaction_log.TxnLogValue) -> list[str]:
    return [f"{topic}-{p}" for topic, ids in (v.partitions or ()) for p in ids]


def _txn_value_text(v: transaction_log.TxnLogValue) -> str:
    return (f"producerId:{v.producer_id},producerEpoch:{v.producer_epoch},state={_txn_state(v.status)},"
            f"partitions=[{','.join(_txn_partitions(v))}],txnLastUpdateTimestamp={v.last_update_ms},"
            f"txnTimeoutMs={v.timeout_ms}")


def _txn_value_fields(txn_id: str, v: transaction_log.TxnLogValue) -> Entry:
    return {
        "transactionalId": txn_id, "producerId": v.producer_id, "producerEpoch": v.producer_epoch,
        "state": _txn_state(v.status), "partitions": _txn_partitions(v), "txnTimeoutMs": v.timeout_ms,
        "txnStartTimestamp": v.start_ms, "txnLastUpdateTimestamp": v.last_update_ms,
        "previousProducerId": v.previous_producer_id, "nextProducerId": v.next_producer_id,
        "clientTransactionVersion": v.client_transaction_version,
    }


def decode_offsets_record(key: bytes | None, value: bytes | None, offset: int) -> Entry:
    """Kafka's OffsetsMessageParser: key {"type", "data"} and payload {"version", "data"}."""
    if key is None:
        return {"key": f"Failed to decode message at offset {offset} using offset topic decoder "
                       "(message had a missing key)"}
    try:
        consumer_key = consumer_group_log.decode_consumer_key(key)
        if consumer_key is not None:
            return _consumer_record(consumer_key, value)
        k = group_log.decode_key(key)
        decoded: Entry = {"key": _offsets_key(k, key)}
        if value is None:
            return {**decoded, "payload": "<DELETE>"}
        return {**decoded, "payload": _offsets_value(k, value)}
    except group_log.UnknownRecordVersion as exc:
        return {"key": f"Unknown record type {exc.version} at offset {offset}, skipping."}
    except group_log.GroupLogDecodeError as exc:
        return {"key": f"Error at offset {offset}, skipping. {exc}"}


def _consumer_record(k: consumer_group_log.ConsumerKey, value: bytes | None) -> Entry:
    """A consumer-protocol group record (KIP-848), named as Kafka's JSON converters name it."""
    data: Entry = {"groupId": k.group}
    if k.record in consumer_group_log.PER_MEMBER:
        data["memberId"] = k.member
    entry: Entry = {"key": {"type": str(int(k.record)), "data": data}}
    if value is None:
        return {**entry, "payload": "<DELETE>"}
    parsed = consumer_group_log.decode_consumer_value(k.record, value)
    return {**entry, "payload": {"version": _version(value), "data": _consumer_value(parsed)}}


def _consumer_value(v: consumer_group_log.ConsumerValue | None) -> Entry:
    cgl = consumer_group_log
    if isinstance(v, cgl.GroupMetadataValue):
        return {"epoch": v.epoch, "metadataHash": v.metadata_hash}
    if isinstance(v, cgl.MemberMetadataValue):
        return {"instanceId": v.instance_id, "rackId": v.rack_id, "clientId": v.client_id,
                "clientHost": v.client_host, "subscribedTopicNames": list(v.subscribed_topic_names),
                "subscribedTopicRegex": v.subscribed_topic_regex,
                "rebalanceTimeoutMs": v.rebalance_timeout_ms, "serverAssignor": v.server_assignor}
    if isinstance(v, cgl.TargetAssignmentMetadataValue):
        return {"assignmentEpoch": v.assignment_epoch, "assignmentTimestamp": v.assignment_timestamp}
    if isinstance(v, cgl.TargetAssignmentMemberValue):
        return {"topicPartitions": _topic_partitions(v.partitions)}
    if isinstance(v, cgl.CurrentAssignmentValue):
        return {"memberEpoch": v.member_epoch, "previousMemberEpoch": v.previous_member_epoch,
                "state": v.state, "assignedPartitions": _topic_partitions(v.assigned),
                "partitionsPendingRevocation": _topic_partitions(v.pending_revocation)}
    return {}


def _topic_partitions(value: consumer_group_log.TopicPartitions) -> list[Entry]:
    ordered = sorted(value.items(), key=lambda item: str(item[0]))
    return [{"topicId": str(t), "partitions": sorted(ps)} for t, ps in ordered]


def _version(data: bytes) -> str:
    return str(int.from_bytes(data[:2], "big", signed=True))


def _offsets_key(k: group_log.GroupLogKey, raw: bytes) -> Entry:
    if isinstance(k, group_log.OffsetCommitKey):
        return {"type": _version(raw), "data": {"group": k.group, "topic": k.topic, "partition": k.partition}}
    return {"type": _version(raw), "data": {"group": k.group}}


def _offsets_value(k: group_log.GroupLogKey, raw: bytes) -> Entry:
    if isinstance(k, group_log.OffsetCommitKey):
        c = group_log.decode_offset_commit_value(raw)
        data: Entry = {"offset": c.offset, "leaderEpoch": c.leader_epoch, "metadata": c.metadata,
                       "commitTimestamp": c.commit_timestamp}
        if c.expire_timestamp != -1:
            data["expireTimestamp"] = c.expire_timestamp
        return {"version": _version(raw), "data": data}
    g = group_log.decode_group_metadata_value(raw)
    return {"version": _version(raw), "data": {
        "protocolType": g.protocol_type, "generation": g.generation, "protocol": g.protocol,
        "leader": g.leader, "currentStateTimestamp": g.current_state_timestamp,
        "members": [_member(m) for m in g.members],
    }}


def _member(m: group_log.MemberMetadata) -> Entry:
    topics = group_log.parse_consumer_subscription_topics(m.subscription)
    return {
        "memberId": m.member_id, "groupInstanceId": m.group_instance_id, "clientId": m.client_id,
        "clientHost": m.client_host, "rebalanceTimeout": m.rebalance_timeout,
        "sessionTimeout": m.session_timeout,
        "subscription": {"topics": sorted(topics)} if topics is not None
        else base64.b64encode(m.subscription).decode(),
        "assignment": base64.b64encode(m.assignment).decode(),
    }


# -- indexes, snapshots, checkpoints -----------------------------------------------------


def _entries_of(path: Path, size: int) -> bytes:
    data = path.read_bytes()
    if len(data) % size:
        raise DumpError(f"size {len(data)} is not a multiple of the entry size {size} "
                        "(truncated or not an index)")
    return data


def dump_offset_index(path: Path, options: Options) -> FileDump:
    base = _base_offset(path)
    entries = [{"offset": base + rel, "position": pos}
               for rel, pos in OFFSET_ENTRY.iter_unpack(_entries_of(path, OFFSET_ENTRY.size))]
    return FileDump(path, "index", entries)


def dump_time_index(path: Path, options: Options) -> FileDump:
    base = _base_offset(path)
    entries = [{"timestamp": ts, "offset": base + rel}
               for ts, rel in TIME_ENTRY.iter_unpack(_entries_of(path, TIME_ENTRY.size))]
    return FileDump(path, "timeindex", entries)


def dump_txn_index(path: Path, options: Options) -> FileDump:
    data = _entries_of(path, TXN_ENTRY.size)
    try:
        txns = [AbortedTxn.unpack(data[i:i + TXN_ENTRY.size]) for i in range(0, len(data), TXN_ENTRY.size)]
    except CorruptIndexError as exc:
        raise DumpError(str(exc)) from None
    return FileDump(path, "txnindex", [
        {"version": t.version, "producerId": t.producer_id, "firstOffset": t.first_offset,
         "lastOffset": t.last_offset, "lastStableOffset": t.last_stable_offset} for t in txns
    ])


def dump_snapshot(path: Path, options: Options) -> FileDump:
    """Kafka's dumpProducerIdSnapshot fields (one batch of metadata per producer)."""
    try:
        snapshot = decode_snapshot(path.read_bytes())
    except CorruptSnapshotError as exc:
        raise DumpError(str(exc)) from None
    return FileDump(path, "snapshot", [
        {"producerId": e.producer_id, "producerEpoch": e.epoch, "coordinatorEpoch": e.coordinator_epoch,
         "currentTxnFirstOffset": e.current_txn_first_offset if e.current_txn_first_offset >= 0 else None,
         "lastTimestamp": e.timestamp, "firstSequence": _first_sequence(e.last_sequence, e.offset_delta),
         "lastSequence": e.last_sequence, "lastOffset": e.last_offset, "offsetDelta": e.offset_delta,
         "timestamp": e.timestamp}
        for e in snapshot
    ])


def _first_sequence(last_sequence: int, offset_delta: int) -> int:
    if last_sequence < 0:
        return last_sequence
    return (last_sequence - offset_delta) % (1 << 31)


def dump_leader_epochs(path: Path, options: Options) -> FileDump:
    entries = _checkpoint(path, LeaderEpochCheckpointFile(path).read)
    return FileDump(path, "leader-epoch-checkpoint",
                    [{"epoch": e.epoch, "startOffset": e.start_offset} for e in entries])


def dump_offset_checkpoint(path: Path, options: Options) -> FileDump:
    offsets = _checkpoint(path, OffsetCheckpointFile(path).read)
    return FileDump(path, "offset-checkpoint",
                    [{"topic": t, "partition": p, "offset": o} for (t, p), o in offsets.items()])


def _checkpoint(path: Path, read: Callable[[], T]) -> T:
    """A checkpoint file's content, read by the storage code; a corrupt one is a DumpError."""
    try:
        return read()
    except CorruptCheckpointError as exc:
        raise DumpError(str(exc).removeprefix(f"{path}: ")) from None


def dump_meta_properties(path: Path, options: Options) -> FileDump:
    props = parse_properties(path.read_text(encoding="utf-8", errors="replace"))
    return FileDump(path, "meta.properties", [{"key": k, "value": v} for k, v in props.items()])


# -- files and directories --------------------------------------------------------------


Dumper = Callable[[Path, Options], FileDump]
BY_SUFFIX: dict[str, Dumper] = {
    ".log": dump_log, ".index": dump_offset_index, ".timeindex": dump_time_index,
    ".txnindex": dump_txn_index, SNAPSHOT_SUFFIX: dump_snapshot,
}
BY_NAME: dict[str, Dumper] = {
    LEADER_EPOCH_CHECKPOINT: dump_leader_epochs, META_PROPERTIES: dump_meta_properties,
    **{name: dump_offset_checkpoint for name in OFFSET_CHECKPOINTS},
}


def _base_offset(path: Path) -> int:
    stem = path.name.split(".")[0]
    if not stem.isdigit():
        raise DumpError(f"the file name does not start with a base offset ({path.name})")
    return int(stem)


def _topic_of(path: Path) -> str | None:
    found = parse_partition_dir(path.resolve().parent.name)
    return found[0] if found else None


def dumper_for(path: Path) -> Dumper | None:
    if path.name in BY_NAME:
        return BY_NAME[path.name]
    return BY_SUFFIX.get(path.suffix)


def dump_file(path: Path, options: Options) -> FileDump:
    if not path.exists():
        return FileDump(path, "missing", problems=["no such file or directory"])
    dumper = dumper_for(path)
    if dumper is None:
        return FileDump(path, "unknown", problems=["Ignoring unknown file"])
    try:
        return dumper(path, options)
    except DumpError as exc:
        return FileDump(path, dumper.__name__.removeprefix("dump_"), problems=[str(exc)])
    except (OSError, UnicodeDecodeError) as exc:
        return FileDump(path, "unreadable", problems=[_os_error(exc)])


def _os_error(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"cannot read: {exc.strerror}"
    return f"cannot read: {exc}"


def _segment_key(path: Path) -> tuple[int, int, str]:
    stem = path.name.split(".")[0]
    order = SUFFIX_ORDER.index(path.suffix) if path.suffix in SUFFIX_ORDER else len(SUFFIX_ORDER)
    return (int(stem) if stem.isdigit() else -1, order, path.name)


def partition_files(directory: Path) -> list[Path]:
    """A partition dir's files in reading order: each segment's files, then the epoch checkpoint."""
    files = [p for p in directory.iterdir() if p.is_file() and p.suffix in BY_SUFFIX]
    ordered = sorted(files, key=_segment_key)
    epochs = directory / LEADER_EPOCH_CHECKPOINT
    return ordered + ([epochs] if epochs.is_file() else [])


def _partition_key(path: Path) -> TopicPartition:
    found = parse_partition_dir(path.name)
    assert found is not None
    return found


def data_dir_files(directory: Path) -> list[Path]:
    """A data dir's own files, then every partition's, topic by topic."""
    own = [directory / name for name in DIR_FILES if (directory / name).is_file()]
    partitions = sorted((p for p in directory.iterdir() if p.is_dir() and parse_partition_dir(p.name)),
                        key=_partition_key)
    return own + [f for p in partitions for f in partition_files(p)]


def files_to_dump(path: Path) -> list[Path]:
    if not path.is_dir():
        return [path]
    if parse_partition_dir(path.name) is not None and not (path / META_PROPERTIES).exists():
        return partition_files(path)
    return data_dir_files(path)


def dump_paths(paths: list[Path], options: Options) -> Iterator[FileDump]:
    for path in paths:
        for file in files_to_dump(path):
            yield dump_file(file, options)


# -- output ------------------------------------------------------------------------------


def _value(v: object) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, dict):
        return json.dumps(v, separators=(",", ":"))
    if isinstance(v, list):
        return "[" + ",".join(str(x) for x in v) + "]"
    return str(v)


def _fields(entry: Entry, skip: tuple[str, ...] = ()) -> str:
    return " ".join(f"{k}: {_value(v)}" for k, v in entry.items() if k not in skip)


def batch_line(e: Entry) -> str:
    head = _fields(e, skip=("deleteHorizonMs", "position", "timestampType", "maxTimestamp", "size", "magic",
                            "compresscodec", "crc", "isvalid"))
    horizon_ms = e["deleteHorizonMs"]
    horizon = "OptionalLong.empty" if horizon_ms is None else f"OptionalLong[{horizon_ms}]"
    return (f"{head} deleteHorizonMs: {horizon} position: {e['position']} {e['timestampType']}: "
            f"{e['maxTimestamp']} size: {e['size']} magic: {e['magic']} compresscodec: {e['compresscodec']} "
            f"crc: {e['crc']} isvalid: {_value(e['isvalid'])}")


def record_line(r: Entry) -> str:
    head = f"| offset: {r['offset']} {r['timestampType']}: {r['timestamp']} "
    rest = {k: v for k, v in r.items() if k not in ("offset", "timestampType", "timestamp", "transaction")}
    return head + _fields(rest)


def entry_line(kind: str, e: Entry) -> str:
    if "record" in e:
        return record_line(e["record"])
    if "logStartingOffset" in e:
        return f"Log starting offset: {e['logStartingOffset']}"
    if kind == "log":
        return batch_line(e)
    if kind == "snapshot" and e["currentTxnFirstOffset"] is None:
        e = {**e, "currentTxnFirstOffset": "None"}
    if kind == "meta.properties":
        return f"{e['key']}={e['value']}"
    return _fields(e)


def write_text(dump: FileDump, out: TextIO) -> None:
    out.write(f"Dumping {dump.path}\n")
    for e in dump.entries:
        out.write(entry_line(dump.kind, e) + "\n")
    if dump.trailing_bytes:
        out.write(f"Found {dump.trailing_bytes} invalid bytes at the end of {dump.path.name}\n")


def as_json(dump: FileDump) -> Entry:
    return {"file": str(dump.path), "type": dump.kind, "entries": dump.entries, "problems": dump.problems}


# -- command line ------------------------------------------------------------------------


def add_parser(subparsers: Subcommands) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "dump", help="print the contents of data dirs and log files (like kafka-dump-log.sh)",
        description="Print segments, indexes, snapshots and checkpoints, read-only "
                    "(safe beside a live broker).",
    )
    parser.add_argument("paths", nargs="*", type=Path, metavar="PATH",
                        help="a data dir, a partition dir or single files")
    parser.add_argument("--files", dest="files", default=None, metavar="FILE1,FILE2",
                        help="comma-separated files, as kafka-dump-log.sh --files (added to PATH)")
    parser.add_argument("--print-data", "--print-data-log", action="store_true", dest="print_data",
                        help="print each record's key and payload (UTF-8)")
    parser.add_argument("--decode-internal", action="store_true",
                        help="decode __transaction_state and __consumer_offsets records")
    parser.add_argument("--json", action="store_true", help="one JSON document instead of lines")
    return parser


def run(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Run the parsed `gregor dump ...` command; the process exit code."""
    paths = list(args.paths) + [Path(f) for f in (args.files or "").split(",") if f]
    options = Options(print_data=args.print_data, decode_internal=args.decode_internal)
    if not paths:
        print("gregor dump: name at least one data dir, partition dir or file", file=err)
        return 2
    dumps: list[Entry] = []
    failed = False
    for dump in dump_paths(paths, options):
        if args.json:
            dumps.append(as_json(dump))
        else:
            write_text(dump, out)
            out.flush()
        for problem in dump.problems:
            print(f"gregor dump: {dump.path}: {problem}", file=err)
        failed = failed or bool(dump.problems)
    if args.json:
        json.dump(dumps, out, indent=1)
        out.write("\n")
    return 1 if failed else 0
