"""How fast a transaction coordinator loads its `__transaction_state` partition, in process.

A coordinator that becomes leader of the partition (a failover, a broker back after its
registration lapsed) answers COORDINATOR_LOAD_IN_PROGRESS to the partition's producers
until it has read the whole log. The log holds a record per state change (about three per
transaction) until the cleaner compacts it, which it does not do to the active segment
(100 MiB by default): a producer that ran some thousands of transactions leaves tens of
thousands of records. Chaos seed 100 found loads of 5 to 35 s on a 47,000-record log,
and its transactional clients starved once faults came faster than that.

Builds a log of RECORDS records (TRANSACTIONS committed transactions of IDS transactional
ids, one batch per record as the coordinator writes them) with the real state machine,
then times CoordinatorLog.load into a fresh machine, as the broker's load runs (records
staged, each id's last record replayed). Prints records per second, the best of ROUNDS.

Run with `python -m bench.coordinator_load` (part of `make bench`).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import tempfile
import time
from pathlib import Path

from bench.reference import GREGOR, Comparison, arguments
from broker.coordination.coordinator_log import CoordinatorLog
from broker.coordination.internal_topics import InternalRecord, record_batch
from broker.replication.replica_manager import Partition, ReplicaManager
from broker.store.image import PartitionEpoch, PartitionState
from coordinator.transaction import Outcome, TransactionStateMachine
from protocol.types import LeaderEpoch, NodeId
from storage.log_config import LogConfig
from storage.log_manager import LogManager
from storage.producer_state import AppendOrigin

BENCHMARK = "coordinator_load"
TOPIC = "__transaction_state"
IDS = 10
NOW = 1_700_000_000_000
ME = NodeId(1)


def _machine() -> TransactionStateMachine:
    ids = itertools.count(1000)
    machine = TransactionStateMachine(
        num_partitions=1, max_timeout_ms=900_000, new_producer_id=lambda: next(ids),
    )
    machine.begin_load(0, 0)
    machine.finish_load(0)
    return machine


def _history(transactions: int) -> list[tuple[bytes, bytes | None]]:
    """The records of `transactions` committed transactions spread over IDS ids."""
    machine, records = _machine(), []

    def run(outcome: Outcome) -> Outcome:
        if outcome.record is not None:
            records.append(outcome.record)
            machine.replay(*outcome.record)
        return outcome

    producers = {}
    for n in range(IDS):
        init = run(machine.init_producer_id(f"bench-{n}", 60_000, -1, -1, NOW))
        producers[f"bench-{n}"] = (init.producer_id, init.producer_epoch)
    for n in range(transactions):
        tid = f"bench-{n % IDS}"
        pid, epoch = producers[tid]
        run(machine.add_partitions(tid, pid, epoch, (("orders", n % 3),), NOW))
        run(machine.end_txn(tid, pid, epoch, True, NOW, 0))
        run(machine.complete_markers(tid, NOW))
    return records


def _lead(replicas: ReplicaManager) -> Partition:
    state = PartitionState((ME,), (ME,), ME, LeaderEpoch(1), PartitionEpoch(1))
    return replicas.become_leader(TOPIC, 0, LogConfig(), state, NOW)


async def _load(replicas: ReplicaManager, part: Partition) -> float:
    machine = TransactionStateMachine(num_partitions=1, max_timeout_ms=900_000, new_producer_id=lambda: 1)
    machine.begin_load(0, 1)

    def stage(record: InternalRecord) -> None:
        if record.key is not None:
            machine.stage(0, record.key, record.value)

    start = time.perf_counter()
    assert await CoordinatorLog(replicas, TOPIC, 5).load(part, stage)
    assert machine.replay_staged(0) == []
    machine.finish_load(0)
    elapsed = time.perf_counter() - start
    assert len(machine.transactions) == IDS
    return elapsed


def bench(transactions: int, rounds: int) -> tuple[int, float]:
    """(records in the log, best seconds to load them)."""
    records = _history(transactions)
    with tempfile.TemporaryDirectory(prefix="gregor-bench-load-") as tmp:
        manager = LogManager([Path(tmp)], 1, "bench")
        try:
            replicas = ReplicaManager(manager, 1)
            part = _lead(replicas)
            for record in records:
                result = replicas.append(part, record_batch([record], NOW), NOW, AppendOrigin.COORDINATOR)
                assert result.error == 0, result
            part.log.update_high_watermark(part.log.log_end_offset)
            best = min(asyncio.run(_load(replicas, part)) for _ in range(rounds))
        finally:
            manager.shutdown()
    return len(records), best


def main() -> None:
    parser = arguments(argparse.ArgumentParser(description=__doc__))
    parser.add_argument("--transactions", type=int, default=16_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    count, seconds = bench(args.transactions, args.rounds)
    comparison = Comparison(BENCHMARK)
    comparison.record(GREGOR, f"load {TOPIC}: {args.transactions} transactions of {IDS} ids",
                      count / seconds, "rec/s", f"{count} records in {seconds:.2f} s")
    comparison.finish(args.update_baseline)


if __name__ == "__main__":
    main()
