"""Log cleaner throughput, and produce throughput while the cleaner works.

Two parts:
- in-process: a compacted log of RECORDS keyed records (VALUE bytes each, KEYS distinct
  keys, batches of BATCH records, uncompressed and lz4) in closed segments, cleaned by
  LogCleaner.clean_once until nothing is left to clean; prints MB/s read by the cleaner
  and records/s;
- a real broker: idempotent acks=all keyed produce into a compacted topic with small
  segments, once with `log.cleaner.enable=false` and once with the cleaner running
  continuously (dirty ratio 0.01, backoff 50 ms); prints produce MB/s of each and the
  cleaning passes made meanwhile; then the same on one Apache Kafka node (bench/reference.py),
  with Gregor's figure, Kafka's and the ratio (the in-process part has no Kafka equivalent).

Run with `python -m bench.cleaner [--records N]` (part of `make bench`).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from bench import reference
from bench.produce_fetch import _produce
from bench.reference import GREGOR, KAFKA, Comparison
from protocol.errors import ErrorCode
from storage.cleaner.cleaner import CleanerConfig, LogCleaner
from storage.log import Log
from storage.log_config import LogConfig
from tests.unit.storage.batches import DefaultRecordBatchBuilder

NOW = 1_000_000_000
BATCH = 200
VALUE = 100
LZ4 = 3
BENCHMARK = "cleaner"


def _batch(first: int, keys: int, payload: bytes, compression: int) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=compression, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=10**8)
    for i in range(BATCH):
        builder.append(i, timestamp=NOW, key=b"key-%08d" % ((first + i) % keys), value=payload, headers=[])
    return bytes(builder.build())


def bench_in_process(records: int, keys: int, compression: int) -> tuple[float, float, int, int]:
    """(MB/s read, records/s, bytes before, bytes after) of cleaning one log to the end."""
    with tempfile.TemporaryDirectory(prefix="gregor-bench-cleaner-") as tmp:
        config = LogConfig(cleanup_policy="compact", segment_bytes=8 * 2**20,
                           delete_retention_ms=0)
        lg = Log.open(Path(tmp) / "t-0", config, 0, None, True, NOW)
        for first in range(0, records, BATCH):
            payload = os.urandom(VALUE // 2).hex().encode()  # lz4 compresses within a batch only
            result = lg.append_as_leader(_batch(first, keys, payload, compression), 0, NOW)
            assert result.error is ErrorCode.NONE, result
        lg.roll(NOW)
        lg.update_high_watermark(lg.log_end_offset)  # all replicated: the cleaner may reach the end
        before = sum(s.size for s in lg.segments)
        cleaner = LogCleaner(lambda: {("t", 0): lg}, CleanerConfig())
        read = seen = 0
        start = time.perf_counter()
        while (result := cleaner.clean_once(NOW)) is not None:
            read += result.stats.bytes_read
            seen += result.stats.records_read
        elapsed = time.perf_counter() - start
        after = sum(s.size for s in lg.segments)
        lg.close()
    return read / elapsed / 2**20, seen / elapsed, before, after


# A cleaning pass in each server's log: Gregor's own line, Kafka's LogCleaner's.
PASS_LINE = {GREGOR: "{log}: cleaned", KAFKA: "Beginning cleaning of log {log}"}


def bench_broker(start: reference.Start, records: int, keys: int, cleaner: bool) -> tuple[str, float, int]:
    """(side, produce MB/s, cleaning passes) on a compacted topic, cleaner on or off."""
    overrides = {
        "log.cleaner.enable": cleaner, "log.cleaner.backoff.ms": 50,
        "log.cleaner.min.cleanable.ratio": 0.01, "log.cleaner.delete.retention.ms": 0,
    }
    with (
        tempfile.TemporaryDirectory(prefix="gregor-bench-cleaner-") as tmp,
        start(Path(tmp), overrides) as server,
    ):
        topic = "bench-compacted"
        server.create_topic(topic, 2, 1, {"cleanup.policy": "compact", "segment.bytes": str(2 * 2**20)})
        elapsed = _produce(server.bootstrap, topic, records, VALUE, "none", keys, partitions=2)
        text = server.log_text()
        passes = sum(text.count(PASS_LINE[server.side].format(log=f"{topic}-{p}")) for p in (0, 1))
    return server.side, records * (VALUE + 12) / elapsed / 2**20, passes


def main() -> None:
    parser = reference.arguments(argparse.ArgumentParser(description=__doc__))
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--keys", type=int, default=20_000)
    args = parser.parse_args()
    print(f"cleaner, in process: {args.records} records of {VALUE} bytes, {args.keys} keys, "
          f"batches of {BATCH}")
    for name, compression in (("uncompressed", 0), ("lz4", LZ4)):
        mb_s, rec_s, before, after = bench_in_process(args.records, args.keys, compression)
        print(f"  {name:>12}: {mb_s:7.1f} MB/s read, {rec_s / 1000:7.0f} k records/s, "
              f"{before / 2**20:.1f} MB -> {after / 2**20:.1f} MB")
    print(f"produce into a compacted topic (2 partitions, 2 MiB segments): {args.records} records, "
          f"{args.keys} keys")
    comparison = Comparison(BENCHMARK)
    for start in reference.SINGLE:
        for cleaner in (False, True):
            side, mb_s, passes = bench_broker(start, args.records, args.keys, cleaner)
            row = f"produce into a compacted topic, cleaner {'on' if cleaner else 'off'}"
            comparison.record(side, row, mb_s, "MB/s", f"{passes} cleaning passes")
    comparison.finish(args.update_baseline)


if __name__ == "__main__":
    main()
