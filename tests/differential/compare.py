"""Answers of Kafka and Gregor compared field by field after normalising what legitimately
differs (ids each broker makes up, hosts and ports, clocks, throttling, free-text messages).

The accepted differences are the table "Accepted differences" of docs/differences.md: a
difference at a path that a row of that table names is reported as accepted, any other one
fails the case with both answers.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from tests.integration.harness import REPO_ROOT

DIFFERENCES_PAGE = REPO_ROOT / "docs" / "differences.md"
DIFFERENCES_SECTION = "## Accepted differences"
CASE_TOPIC = re.compile(r"d-[0-9a-f]{10}")  # tests/differential/conftest.py names topics so
# Fields whose value each broker makes up: compared by order of first appearance in a case.
RENAMED = {"producer_id", "topic_id", "member_id", "session_id", "leader"}
SAME_IDS = {"leader": "member_id"}  # a field holding ids of another field's kind
# Fields compared only as "present": host names, ports, clocks and free text.
BLANKED = {
    "host",
    "port",
    "cluster_id",
    "log_append_time_ms",
    "log_dir",
    "total_bytes",
    "usable_bytes",
    "last_timestamp",
    "transaction_start_time_ms",
    "finalized_features_epoch",
    "throttle_time_ms",
    "client_host",
    "message",
}
# Lists of numbers that are sets: DescribeTransactions' partitions come in Kafka's hash order.
UNORDERED = {"partitions"}
# The values that mean "none" for each renamed field (kept as they are).
NO_ID: dict[str, set[Any]] = {
    "producer_id": {-1},
    "session_id": {0},
    "member_id": {"", None},
    "topic_id": {None, "00000000-0000-0000-0000-000000000000", "AAAAAAAAAAAAAAAAAAAAAA"},
}
# The fields that identify an element of a list, in the order they are tried for sorting.
LIST_KEYS = (
    "name",
    "topic",
    "topic_name",
    "partition_index",
    "index",
    "partition",
    "group_id",
    "transactional_id",
    "api_key",
    "node_id",
    "resource_name",
    "config_name",
    "broker_id",
    "log_dir",
    "producer_id",
    "user",  # DescribeUserScramCredentials: Kafka lists users in its HashMap's order
)


@dataclass
class Renamer:
    """Canonical names for made-up ids, by order of first appearance (one per broker and case)."""

    seen: dict[tuple[str, Any], str] = field(default_factory=dict)

    def __call__(self, name: str, value: Any) -> Any:
        if value in NO_ID.get(name, {None}):
            return value
        key = (name, value)
        if key not in self.seen:
            self.seen[key] = f"<{name}#{sum(1 for k in self.seen if k[0] == name)}>"
        return self.seen[key]


def normalise(tree: Any, rename: Renamer, name: str = "") -> Any:
    if isinstance(tree, dict):
        return {k: normalise(v, rename, k) for k, v in tree.items()}
    if isinstance(tree, list) and name in UNORDERED and all(isinstance(v, int) for v in tree):
        return sorted(tree)
    if isinstance(tree, list):
        return _sorted([normalise(v, rename, name) for v in tree])
    if name in RENAMED:
        return rename(SAME_IDS.get(name, name), tree)
    if name in ("error_message", "error_msg"):  # free text in Kafka; some of Gregor's are None
        return "<text>"
    if name in BLANKED:
        return "<set>" if tree not in (None, -1, "") or name == "throttle_time_ms" else tree
    if name == "records" and isinstance(tree, bytes | bytearray | memoryview):
        return batches(bytes(tree), rename)
    if name == "records" and isinstance(tree, str) and tree:
        return _text_batches(tree, rename)
    if isinstance(tree, bytes | bytearray):
        return bytes(tree).hex()
    return tree


ESCAPED = re.compile(r"\\x([0-9a-f]{2})")


def _text_batches(text: str, rename: Renamer) -> Any:
    """The batches of a records field that kafka-python's `to_dict` gave as text (its bytes
    decoded as UTF-8, an invalid byte as `\\xNN`); the text itself if it does not parse."""
    raw, at = bytearray(), 0
    for m in ESCAPED.finditer(text):
        raw += text[at : m.start()].encode() + bytes([int(m[1], 16)])
        at = m.end()
    raw += text[at:].encode()
    try:
        return batches(bytes(raw), rename)
    except Exception:  # not batches after all: compared as the text
        return text


def batches(data: bytes, rename: Renamer) -> list[dict[str, Any]]:
    """The batches of a records field as trees: producer ids renamed, CRCs left out (they cover
    the producer id), records with offset, timestamp, key, value and headers."""
    from kafka.record import MemoryRecords

    out: list[dict[str, Any]] = []
    records = MemoryRecords(data)
    while (batch := records.next_batch()) is not None:
        out.append(
            {
                "base_offset": batch.base_offset,
                "producer_id": rename("producer_id", batch.producer_id),
                "producer_epoch": batch.producer_epoch,
                "base_sequence": batch.base_sequence,
                "is_transactional": batch.is_transactional,
                "is_control": batch.is_control_batch,
                # a control record's timestamp, or any under LogAppendTime, is the broker's clock
                "records": [
                    [r.offset, "<set>" if _clock_time(batch) else r.timestamp, r.key, r.value,
                     list(r.headers)]
                    for r in batch
                ],
            }
        )
    return out


def _clock_time(batch: Any) -> bool:
    return bool(batch.is_control_batch or batch.timestamp_type == 1)  # 1: LogAppendTime


def _sorted(items: list[Any]) -> list[Any]:
    if not items or not all(isinstance(i, dict) for i in items):
        return items
    keys = [k for k in LIST_KEYS if all(k in i for i in items)]
    if not keys:
        return items
    return sorted(items, key=lambda i: tuple(str(i[k]) for k in keys))


@dataclass(frozen=True)
class Difference:
    path: str
    kafka: Any
    gregor: Any

    def __str__(self) -> str:
        return f"{self.path}: kafka {self.kafka!r}, gregor {self.gregor!r}"


def differences(kafka: Any, gregor: Any, path: str = "", common_only: bool = False) -> list[Difference]:
    """Every leaf where the trees differ; with `common_only`, fields one side lacks are left out
    (the two answers are of different versions)."""
    if isinstance(kafka, dict) and isinstance(gregor, dict):
        out: list[Difference] = []
        names = kafka.keys() & gregor.keys() if common_only else kafka.keys() | gregor.keys()
        for k in sorted(names):
            out += differences(
                kafka.get(k, "<absent>"), gregor.get(k, "<absent>"), _join(path, k), common_only
            )
        return out
    if isinstance(kafka, list) and isinstance(gregor, list):
        key = _identity(kafka + gregor)
        if key is not None:
            return _keyed_differences(kafka, gregor, key, path, common_only)
        if len(kafka) != len(gregor):
            return [Difference(path + "[]", kafka, gregor)]
        out = []
        for k, g in zip(kafka, gregor, strict=True):
            out += differences(k, g, path + "[]", common_only)
        return out
    return [] if kafka == gregor else [Difference(path, kafka, gregor)]


def _identity(items: list[Any]) -> str | None:
    """The field that names each element of a list of dicts, if one does (unique values)."""
    if not items or not all(isinstance(i, dict) for i in items):
        return None
    for k in LIST_KEYS:
        if all(k in i for i in items):
            return k
    return None


def _keyed_differences(
    kafka: list[Any], gregor: list[Any], key: str, path: str, common_only: bool
) -> list[Difference]:
    """Elements matched by their `key` field: path `list[value]` (a case's topic name is `T`)."""
    k_items, g_items = {str(i[key]): i for i in kafka}, {str(i[key]): i for i in gregor}
    if len(k_items) != len(kafka) or len(g_items) != len(gregor):  # not unique: compare in order
        return [Difference(path + "[]", kafka, gregor)] if kafka != gregor else []
    out: list[Difference] = []
    for name in sorted(k_items.keys() | g_items.keys()):
        at = f"{path}[{CASE_TOPIC.sub('T', name)}]"
        out += differences(k_items.get(name, "<absent>"), g_items.get(name, "<absent>"), at, common_only)
    return out


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


@cache
def accepted_rows() -> list[tuple[str, str, str, str, str]]:
    """(API name, path pattern, Kafka's cell, Gregor's cell, why) of every row of
    docs/differences.md's accepted-differences table."""
    text = DIFFERENCES_PAGE.read_text()
    start = text.index(DIFFERENCES_SECTION)
    rows: list[tuple[str, str, str, str, str]] = []
    for line in text[start:].splitlines()[1:]:
        if line.startswith("## "):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 5 and cells[1].startswith("`"):
            rows.append((cells[0], cells[1].strip("`"), cells[2], cells[3], cells[-1]))
    return rows


def accepted_table() -> list[tuple[str, str, str]]:
    """(API name, path pattern, why) of every row."""
    return [(api, pattern, why) for api, pattern, _k, _g, why in accepted_rows()]


ONLY = re.compile(r"only `([^`]*)`")  # a cell "only `48` ...": the row accepts that value alone


def accepted(api_name: str, version: int, diff: Difference) -> bool:
    for api, pattern, kafka, gregor, _why in accepted_rows():
        wanted, _, versions = api.partition(" v")
        if wanted != api_name or (versions and not _in_range(version, versions)):
            continue
        if fnmatch.fnmatchcase(diff.path, _literal_brackets(pattern)) and _values_fit(kafka, gregor, diff):
            return True
    return False


def _values_fit(kafka: str, gregor: str, diff: Difference) -> bool:
    k, g = ONLY.match(kafka), ONLY.match(gregor)
    return (k is None or k[1] == str(diff.kafka)) and (g is None or g[1] == str(diff.gregor))


def _literal_brackets(pattern: str) -> str:
    """A table pattern for fnmatch: `[`/`]` are the path's own brackets, only `*` is a wildcard."""
    return "".join("[[]" if c == "[" else "[]]" if c == "]" else c for c in pattern)


def _in_range(version: int, versions: str) -> bool:
    m = re.fullmatch(r"(\d+)(?:-(\d+))?", versions.strip())
    assert m, f"docs/differences.md accepted differences: bad version range {versions!r}"
    low = int(m[1])
    return low <= version <= int(m[2] or low)
