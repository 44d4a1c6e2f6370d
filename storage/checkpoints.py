"""Kafka's small text files: offset checkpoints, the leader-epoch checkpoint,
``meta.properties`` and the clean-shutdown marker. Every write goes to a
temporary file, is fsynced, then atomically renamed over the target."""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from protocol.types import Offset, TopicPartition

CHECKPOINT_VERSION = 0
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
META_PROPERTIES = "meta.properties"
CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"



class CorruptCheckpointError(Exception):
    pass


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via tmp file + fsync + rename + dir fsync; on failure the
    tmp file is removed and ``path`` is as it was."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a full disk: no half-written file is left behind
        raise
    fsync_dir(path.parent)


def _parse_checkpoint(path: Path, fields: int) -> list[list[str]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    if len(lines) < 2:
        raise CorruptCheckpointError(f"{path}: missing version/count lines")
    if lines[0].strip() != str(CHECKPOINT_VERSION):
        raise CorruptCheckpointError(f"{path}: unsupported version {lines[0]!r}")
    try:
        count = int(lines[1])
    except ValueError as exc:
        raise CorruptCheckpointError(f"{path}: bad count line {lines[1]!r}") from exc
    entries = [line.split() for line in lines[2:] if line.strip()]
    if len(entries) != count or any(len(e) != fields for e in entries):
        raise CorruptCheckpointError(f"{path}: expected {count} entries of {fields} fields")
    return entries


def _format_checkpoint(rows: list[str]) -> str:
    return "".join(f"{line}\n" for line in [str(CHECKPOINT_VERSION), str(len(rows)), *rows])


class OffsetCheckpointFile:
    """``topic partition offset`` per line (recovery point, replication, log start)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        rows = [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())]
        atomic_write(self.path, _format_checkpoint(rows))

    def read(self) -> dict[TopicPartition, Offset]:
        if not self.path.exists():
            return {}
        try:
            return {(t, int(p)): Offset(int(o)) for t, p, o in _parse_checkpoint(self.path, 3)}
        except ValueError as exc:
            raise CorruptCheckpointError(f"{self.path}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int


class LeaderEpochCheckpointFile:
    """``epoch startOffset`` per line."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, entries: list[EpochEntry]) -> None:
        atomic_write(self.path, _format_checkpoint([f"{e.epoch} {e.start_offset}" for e in entries]))

    def read(self) -> list[EpochEntry]:
        if not self.path.exists():
            return []
        try:
            return [EpochEntry(int(e), int(o)) for e, o in _parse_checkpoint(self.path, 2)]
        except ValueError as exc:
            raise CorruptCheckpointError(f"{self.path}: {exc}") from exc


def uuid_to_base64(value: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString()``: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")


def random_kafka_uuid() -> str:
    while True:
        u = uuid.uuid4()
        # Kafka reserves the all-zero id and ids whose high bits are zero (ONE, ...).
        if u.int >> 64:
            return uuid_to_base64(u)


@dataclass(frozen=True, slots=True)
class MetaProperties:
    """``meta.properties`` as KRaft Kafka writes it (version=1)."""

    node_id: int
    cluster_id: str
    directory_id: str
    version: int = 1

    def to_text(self) -> str:
        props = {
            "cluster.id": self.cluster_id,
            "directory.id": self.directory_id,
            "node.id": str(self.node_id),
            "version": str(self.version),
        }
        return "#\n" + "".join(f"{k}={v}\n" for k, v in props.items())

    @classmethod
    def from_text(cls, text: str, where: str = "meta.properties") -> MetaProperties:
        props = parse_properties(text)
        try:
            version = int(props["version"])
            if version != 1:
                raise CorruptCheckpointError(f"{where}: unsupported version {version}")
            return cls(
                node_id=int(props["node.id"]),
                cluster_id=props["cluster.id"],
                directory_id=props.get("directory.id") or random_kafka_uuid(),
                version=version,
            )
        except (KeyError, ValueError) as exc:
            raise CorruptCheckpointError(f"{where}: missing or bad property {exc}") from exc

    def write(self, directory: Path) -> None:
        atomic_write(directory / META_PROPERTIES, self.to_text())

    @classmethod
    def read(cls, directory: Path) -> MetaProperties | None:
        path = directory / META_PROPERTIES
        if not path.exists():
            return None
        return cls.from_text(path.read_text(encoding="utf-8"), str(path))


def parse_properties(text: str) -> dict[str, str]:
    """A subset of java.util.Properties: comments, ``key=value`` / ``key:value``."""
    props: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut < 0:
            props[line] = ""
        else:
            props[line[:cut].strip()] = line[cut + 1 :].strip()
    return props
