"""What the brokers' kept data dirs (`campaign --keep-data`) say about values stored twice:
for each value at two offsets of one partition, both copies' producer id, producer epoch,
record sequence and partition leader epoch, as `gregor dump --json` reads them. The same
producer epoch and sequence at both offsets is a deduplication the broker missed; a new
epoch (sequences restarted) is the client re-sending after bumping its epoch (KIP-360).
librdkafka does that: an OUT_OF_ORDER_SEQUENCE_NUMBER on one partition (a batch in flight
behind one that failed) makes it bump the epoch for all of them and re-sequence from 0 every
message not yet acknowledged, including one whose first send was appended and answered with a
retriable error (its issue 4953, seen against Apache Kafka; the Java client retries such a
batch under the same epoch).

An aborted transaction's value read by read_committed is looked up the same way: the batch
that holds it (`batch_mates`). One batch holding it and a value of the same client's next,
committed transaction is the client sending the aborted value again, in that transaction: the
Java client's abort race (tests/integration/java/AbortRace.java makes it happen, against Kafka
as against Gregor), which `checker.carried_over` counts apart.

A committed value acknowledged at an offset that holds, instead, an aborted value of the same
client is looked up with the partition's records (`records`): the aborted value's batch, and
whether the producer's next batch continues its sequences. librdkafka's `abort_transaction`
purges a batch that was appended but whose answer was lost, and the next transaction's batch
takes its sequences again under the same epoch, which Kafka, like Gregor, answers as the aborted
batch's duplicate (chaos seed 117; tests/differential/test_client_faults.py makes it happen
against both), which `checker.reused_sequences` counts apart.

    python -m tests.chaos.evidence OUT/data/n1 [--topic queue]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class Copy:
    offset: int
    producer_id: int
    producer_epoch: int
    sequence: int
    leader_epoch: int
    batch_base: int


Records = dict[str, dict[str, list[Copy]]]  # one data dir's: partition -> value -> its copies
StoredTwice = Records  # only the values stored more than once
Batches = dict[str, frozenset[str]]  # one data dir's: value -> the values of the batches holding it


def copies(partition_dir: Path) -> dict[str, list[Copy]]:
    """Every value of one partition dir with the copies of it the log holds."""
    done = subprocess.run([sys.executable, "-m", "broker.cli", "dump", "--print-data", "--json",
                           str(partition_dir)], capture_output=True, text=True, check=True)
    found: dict[str, list[Copy]] = defaultdict(list)
    batch: dict[str, Any] = {}
    for document in json.loads(done.stdout):
        for entry in document.get("entries", []):
            if "baseOffset" in entry:
                batch = entry
            elif "record" in entry and not batch.get("isControl"):
                r = entry["record"]
                found[str(r["payload"])].append(Copy(
                    r["offset"], batch["producerId"], batch["producerEpoch"], r["sequence"],
                    batch["partitionLeaderEpoch"], batch["baseOffset"]))
    return found


def duplicates(data_dir: Path, topic: str) -> StoredTwice:
    """Partition -> value -> its copies, for the values stored more than once."""
    return {p.name: {v: c for v, c in copies(p).items() if len(c) > 1}
            for p in sorted(data_dir.glob(f"{topic}-*")) if p.is_dir()}


def records(data_dir: Path, partitions: Iterable[str]) -> Records:
    """Every value of the named partition dirs ("ctp-1") with its copies."""
    return {name: copies(data_dir / name) for name in sorted(set(partitions)) if (data_dir / name).is_dir()}


def batch_mates(data_dir: Path, partitions: Iterable[str]) -> Batches:
    """Every value of the named partition dirs ("txn-0") with the values stored in the same
    batch as it (as any of its copies)."""
    found: dict[str, frozenset[str]] = {}
    for stored in records(data_dir, partitions).values():
        batches: dict[int, set[str]] = defaultdict(set)
        for value, where in stored.items():
            for c in where:
                batches[c.batch_base].add(value)
        found |= {value: frozenset().union(*(batches[c.batch_base] for c in where))
                  for value, where in stored.items()}
    return found


def resent_under_new_epoch(found: list[Copy]) -> bool:
    """Every copy after the first stored by the same producer id under a higher epoch."""
    ordered = sorted(found, key=lambda c: c.offset)
    return len({c.producer_id for c in ordered}) == 1 and all(
        a.producer_epoch < b.producer_epoch for a, b in pairwise(ordered))


def client_resends(per_broker: Iterable[StoredTwice]) -> set[str]:
    """The values stored twice that every broker holding them twice shows re-sent under a new
    epoch (a broker's copies are its own evidence: one disagreeing keeps the value an anomaly)."""
    verdicts: dict[str, set[bool]] = defaultdict(set)
    for found in per_broker:
        for values in found.values():
            for value, stored in values.items():
                verdicts[value].add(resent_under_new_epoch(stored))
    return {value for value, seen in verdicts.items() if seen == {True}}


def describe(found: StoredTwice) -> list[str]:
    lines = []
    for partition, values in found.items():
        same = sum(1 for c in values.values() if len({(x.producer_epoch, x.sequence) for x in c}) == 1)
        resent = sum(1 for c in values.values() if resent_under_new_epoch(c))
        lines.append(f"{partition}: {len(values)} values stored twice, {same} of them with the same "
                     f"producer epoch and sequence at both offsets, {resent} re-sent under a new epoch")
        lines += [f"  {v}: " + "; ".join(f"@{x.offset} pid {x.producer_id} epoch {x.producer_epoch} "
                                        f"seq {x.sequence} leader epoch {x.leader_epoch}" for x in c)
                  for v, c in sorted(values.items(), key=lambda kv: kv[1][0].offset)]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--topic", default="queue")
    args = parser.parse_args()
    print("\n".join(describe(duplicates(args.data_dir, args.topic))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
