"""The broker's produce append path in-process, without sockets or clients: the
repeatable cost of validating and appending one batch of 1 KiB records.

Builds BATCHES idempotent batches of about 1 MB (1 KiB records, keys, consecutive
sequences) per codec, appends each once to a fresh `storage.log.Log` and prints the
fastest and median time per MB. The minimum of many runs hardly moves with other
load on the machine, so a before/after comparison of the append path uses this
figure. Run with `make bench`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from aiokafka.record._crecords import DefaultRecordBatchBuilder

from storage.log import Log
from storage.log_config import LogConfig

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
PRODUCER_ID = 1000
NOW = 1_700_000_000_000


def _batch(codec: int, records: int, size: int, base_sequence: int) -> bytes:
    builder = DefaultRecordBatchBuilder(2, codec, 0, PRODUCER_ID, 0, base_sequence, 1 << 30)
    payload = os.urandom(size // 2).hex().encode()[:size]
    for i in range(records):
        builder.append(i, NOW + i, str(i).encode(), payload, [])
    return bytes(builder.build())


def _measure(codec: str, batches: int, records: int, size: int) -> list[float]:
    """Seconds per MB (of uncompressed record values) for each append."""
    data = [_batch(CODECS[codec], records, size, n * records) for n in range(batches)]
    megabytes = records * size / 1e6
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        log = Log.open(Path(tmp) / "bench-0", LogConfig(), 0, None, True, NOW)
        for batch in data:
            start = time.perf_counter()
            result = log.append_as_leader(batch, 0, NOW)
            out.append((time.perf_counter() - start) / megabytes)
            assert result.error == 0, result
        log.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--codecs", default="none,lz4,zstd,gzip,snappy")
    args = parser.parse_args()
    for codec in args.codecs.split(","):
        times = _measure(codec, args.batches, args.records, args.size)
        print(f"append {codec:7s} {args.records} x {args.size} B per batch: "
              f"min {1000 * min(times):6.3f} ms/MB  median {1000 * statistics.median(times):6.3f} ms/MB",
              flush=True)


if __name__ == "__main__":
    main()
