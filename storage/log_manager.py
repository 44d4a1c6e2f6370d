"""Owner of every partition log in the data dir(s): meta.properties, the
per-dir offset checkpoints and the clean-shutdown marker (Kafka's LogManager)."""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from protocol.types import Offset, TopicPartition
from storage.checkpoints import (
    CLEAN_SHUTDOWN_MARKER,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_CHECKPOINT,
    CorruptCheckpointError,
    MetaProperties,
    OffsetCheckpointFile,
    atomic_write,
    fsync_dir,
    random_kafka_uuid,
)
from storage.cleaner.swap import recover_swaps
from storage.dir_lock import DirLock, LogDirUnusableError, lock_dirs, release_all
from storage.log import Log, parse_partition_dir
from storage.log_config import LogConfig

log = logging.getLogger(__name__)


class InconsistentMetaPropertiesError(Exception):
    """meta.properties belongs to another node or cluster."""


def lock_log_dirs(log_dirs: list[Path], holder: str) -> list[DirLock]:
    """Create the log dirs if needed and lock each one (Kafka's `.lock`): the first
    thing a broker does, before it reads or writes anything in them. Raises
    LogDirLockedError naming the holder when another process uses one of them."""
    for d in log_dirs:
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LogDirUnusableError(f"cannot create log dir {d}: {exc.strerror}") from None
    return lock_dirs(log_dirs, holder)


class LogManager:
    def __init__(
        self,
        log_dirs: list[Path],
        node_id: int,
        cluster_id: str | None,
        *,
        default_config: LogConfig | None = None,
        topic_configs: Mapping[str, LogConfig] | None = None,
        now_ms: int = 0,
        dir_locks: list[DirLock] | None = None,
        on_flush: Callable[[float], None] | None = None,
    ) -> None:
        """`dir_locks`: the locks of `log_dirs` (storage.dir_lock), taken by the caller
        before anything else reads or writes the dirs; released by shutdown(). `on_flush`
        is told the seconds each log flush that fsynced something took."""
        self._on_flush = on_flush
        if not log_dirs:
            raise ValueError("at least one log dir is required")
        self._dir_locks = list(dir_locks or [])
        self.log_dirs = [Path(d) for d in log_dirs]
        self.node_id = node_id
        self.default_config = default_config or LogConfig()
        self._topic_configs = dict(topic_configs or {})
        self._logs: dict[TopicPartition, Log] = {}
        self._dir_of: dict[TopicPartition, Path] = {}
        self._cluster_id = self._load_meta(cluster_id)
        for d in self.log_dirs:
            self._load_dir(d, now_ms)

    # -- start-up -----------------------------------------------------------

    def _load_meta(self, cluster_id: str | None) -> str:
        metas: list[MetaProperties] = []
        for d in self.log_dirs:
            d.mkdir(parents=True, exist_ok=True)
            meta = MetaProperties.read(d)
            if meta is None:
                continue
            if meta.node_id != self.node_id:
                raise InconsistentMetaPropertiesError(
                    f"{d}/meta.properties has node.id={meta.node_id} but this broker is "
                    f"node.id={self.node_id}; point log.dirs at this node's data"
                )
            metas.append(meta)
        found = {m.cluster_id for m in metas}
        if len(found) > 1 or (cluster_id is not None and found and cluster_id not in found):
            raise InconsistentMetaPropertiesError(
                f"cluster.id mismatch: configured {cluster_id!r}, log dirs hold {sorted(found)}"
            )
        resolved = cluster_id or (found.pop() if found else random_kafka_uuid())
        for d in self.log_dirs:
            if MetaProperties.read(d) is None:
                MetaProperties(self.node_id, resolved, random_kafka_uuid()).write(d)
        return resolved

    def _open_log(self, child: Path, tp: TopicPartition, recovery_point: Offset, start: Offset | None,
                  clean: bool, now_ms: int) -> Log:
        """One partition's log, recovered if need be. A file that cannot be read or written
        (a full disk, an I/O error) makes the dir unusable: the broker stops with one line, as
        Kafka's stops once all its log dirs have failed, and recovers again at its next start."""
        try:
            recover_swaps(child)  # a cleaning interrupted by a crash: finish or undo its swap
            return Log.open(child, self._config_for(tp[0]), recovery_point, start, clean, now_ms)
        except OSError as exc:
            raise LogDirUnusableError(f"{child}: cannot load the log: {exc.strerror or exc}") from exc

    def _load_dir(self, directory: Path, now_ms: int) -> None:
        marker = directory / CLEAN_SHUTDOWN_MARKER
        clean = marker.exists()
        recovery = _read_checkpoint(directory / RECOVERY_POINT_CHECKPOINT)
        starts = _read_checkpoint(directory / LOG_START_OFFSET_CHECKPOINT)
        found = [
            (child, tp)
            for child in sorted(directory.iterdir())
            if child.is_dir() and (tp := parse_partition_dir(child.name)) is not None
        ]
        if found and not clean:
            log.warning("%s: no clean-shutdown marker; recovering %d partitions", directory, len(found))
        started = time.monotonic()
        size_before = 0 if clean else sum(_log_bytes(child) for child, _tp in found)
        for child, tp in found:
            if tp in self._logs:
                raise InconsistentMetaPropertiesError(f"{tp} found in two log dirs")
            opened = self._open_log(child, tp, recovery.get(tp, Offset(0)), starts.get(tp), clean, now_ms)
            opened.on_flush = self._on_flush
            self._logs[tp] = opened
            self._dir_of[tp] = directory
        if found and not clean:
            truncated = size_before - sum(_log_bytes(child) for child, _tp in found)
            log.info(
                "%s: recovered %d partitions after an unclean shutdown: %d bytes truncated, %.2f s",
                directory, len(found), truncated, time.monotonic() - started,
            )
        # Kafka deletes the marker once the logs are loaded: a crash from now on is unclean.
        marker.unlink(missing_ok=True)
        if clean:
            fsync_dir(directory)

    def _config_for(self, topic: str) -> LogConfig:
        return self._topic_configs.get(topic, self.default_config)

    # -- queries ------------------------------------------------------------

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    @property
    def data_dir_id(self) -> str:
        """The identity of this broker's data: the directory.id of each log dir, joined."""
        metas = (MetaProperties.read(d) for d in self.log_dirs)
        return ",".join(sorted(m.directory_id for m in metas if m is not None))

    def topics(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for topic, partition in sorted(self._logs):
            out.setdefault(topic, []).append(partition)
        return out

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> dict[TopicPartition, Log]:
        return dict(self._logs)

    # -- changes ------------------------------------------------------------

    def create_log(
        self, topic: str, partition: int, config: LogConfig, now_ms: int = 0, sync: bool = True
    ) -> Log:
        """Create (or return the existing) log; new logs go to the least-loaded dir (its entry
        fsync'd, unless `sync=False` for a caller that calls `sync_log_dirs` after many)."""
        tp = (topic, partition)
        existing = self._logs.get(tp)
        if existing is not None:
            return existing
        directory = self._open_new(topic, partition, config, now_ms)
        if sync:
            fsync_dir(directory)
        return self._logs[tp]

    def create_logs(
        self, topic: str, partitions: Iterable[int], config: LogConfig, created: list[int], now_ms: int = 0,
        sync: bool = True,
    ) -> None:
        """Create new logs of ``topic`` (many at once: one directory fsync per log dir, or none
        with ``sync=False`` for a caller that creates in chunks and calls `sync_log_dirs` once),
        appending each partition to ``created`` as soon as its log exists, so that a caller can
        remove them after a failure half-way."""
        touched: set[Path] = set()
        try:
            for partition in partitions:
                if (topic, partition) not in self._logs:
                    touched.add(self._open_new(topic, partition, config, now_ms))
                created.append(partition)
        finally:
            for directory in touched if sync else ():
                fsync_dir(directory)

    def sync_log_dirs(self) -> None:
        """Every log dir's entries on disk (the new logs' directories)."""
        for directory in self.log_dirs:
            fsync_dir(directory)

    def _open_new(self, topic: str, partition: int, config: LogConfig, now_ms: int) -> Path:
        """Create one log in the least-loaded dir; returns that dir (not yet fsynced)."""
        tp = (topic, partition)
        directory = self.log_dirs[0]
        if len(self.log_dirs) > 1:
            counts = {d: 0 for d in self.log_dirs}
            for d in self._dir_of.values():
                counts[d] += 1
            directory = min(self.log_dirs, key=lambda d: counts[d])
        self._topic_configs[topic] = config
        path = directory / f"{topic}-{partition}"
        try:
            self._logs[tp] = _new_log(path, config, now_ms)
            self._logs[tp].on_flush = self._on_flush
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
        self._dir_of[tp] = directory
        return directory

    def delete_log(self, topic: str, partition: int) -> bool:
        return self.delete_logs(topic, [partition]) == 1

    def delete_logs(self, topic: str, partitions: Iterable[int]) -> int:
        """Delete logs of ``topic`` (one directory fsync per log dir and one checkpoint
        for all of them); returns how many existed."""
        touched: set[Path] = set()
        deleted = 0
        for partition in partitions:
            removed = self._logs.pop((topic, partition), None)
            if removed is not None:
                touched.add(self._dir_of.pop((topic, partition)))
                removed.delete()
                deleted += 1
        for directory in touched:
            fsync_dir(directory)
        if deleted:
            self.checkpoint()
        return deleted

    def update_config(self, topic: str, config: LogConfig) -> None:
        self._topic_configs[topic] = config
        for (t, _p), lg in self._logs.items():
            if t == topic:
                lg.config = config

    # -- periodic work (the broker schedules these) -------------------------

    def cleanup(self, now_ms: int) -> int:
        """Retention and producer-id expiration for every log; returns the number of
        segments deleted."""
        deleted = 0
        for lg in self._logs.values():
            deleted += lg.apply_retention(now_ms)
            lg.remove_expired_producers(now_ms)
        return deleted

    def flush_due(self, now_ms: int) -> int:
        """Time-based (flush.ms) and post-roll flushes; returns how many logs flushed."""
        return sum(1 for lg in self._logs.values() if lg.flush_due(now_ms))

    def checkpoint(self) -> None:
        for d in self.log_dirs:
            mine = {tp: lg for tp, lg in self._logs.items() if self._dir_of[tp] == d}
            recovery = {tp: lg.recovery_point for tp, lg in mine.items()}
            hw = {tp: lg.high_watermark for tp, lg in mine.items()}
            starts = {tp: lg.log_start_offset for tp, lg in mine.items()}
            OffsetCheckpointFile(d / RECOVERY_POINT_CHECKPOINT).write(recovery)
            OffsetCheckpointFile(d / REPLICATION_CHECKPOINT).write(hw)
            OffsetCheckpointFile(d / LOG_START_OFFSET_CHECKPOINT).write(starts)

    def read_high_watermarks(self) -> dict[TopicPartition, int]:
        """The replication-offset checkpoint (for the replica manager's start-up)."""
        out: dict[TopicPartition, int] = {}
        for d in self.log_dirs:
            out.update(_read_checkpoint(d / REPLICATION_CHECKPOINT))
        return out

    def shutdown(self) -> None:
        """Flush everything, write checkpoints, close, then mark the shutdown clean."""
        for lg in self._logs.values():
            lg.flush()
        self.checkpoint()
        for lg in self._logs.values():
            lg.close()
        for d in self.log_dirs:
            atomic_write(d / CLEAN_SHUTDOWN_MARKER, "")
        self._logs.clear()
        release_all(self._dir_locks)


def _log_bytes(partition_dir: Path) -> int:
    """Total size of the partition's `.log` segment files."""
    return sum(p.stat().st_size for p in partition_dir.glob("*.log"))


def _read_checkpoint(path: Path) -> dict[TopicPartition, Offset]:
    try:
        return OffsetCheckpointFile(path).read()
    except (CorruptCheckpointError, OSError) as exc:
        log.warning("ignoring unreadable checkpoint %s: %s", path, exc)
        return {}


def _new_log(path: Path, config: LogConfig, now_ms: int) -> Log:
    """A new partition's log; a directory left there (a creation cut short) is opened as it is."""
    try:
        return Log.create(path, config, now_ms)
    except FileExistsError:
        return Log.open(path, config, Offset(0), None, True, now_ms)
