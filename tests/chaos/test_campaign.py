"""A short campaign of every nemesis, in CI: the cluster on namespaced hosts, every workload
(the queue; transactional writes and consume-transform-produce by confluent-kafka and by the
Java client 4.3), each nemesis once (3 s: beyond the 2 s session and lag timeouts, then 3 s
healed); no anomaly but the open bugs named below, no stall (every producer and consumer
progressing again within 60 s of each heal), every fault injected, every client making
progress, the report written (with what the brokers' logs say: no traceback), the brokers'
data kept and read for values stored twice and for the values each batch holds, everything
torn down. `make chaos` runs long campaigns of the same code."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path

from tests.chaos.campaign import Options, run
from tests.chaos.evidence import batch_mates
from tests.chaos.history import Kind, Outcome
from tests.chaos.nemesis import NEMESES
from tests.chaos.netns import PREFIX, free_run_id
from tests.chaos.report import STALL_S
from tests.chaos.workload import WORKLOADS

# Anomalies reported in the summary without failing the run (docs/fault-testing.md): none
# now, so any anomaly fails the run. Fixed: the "duplicate" (librdkafka sending again after a
# sequence gap a full disk left was answered OUT_OF_ORDER_SEQUENCE_NUMBER) and "reprocessed" (a
# deposed group coordinator answering OffsetFetch from memory; test_stale_coordinator_reads.py).
OPEN_BUGS: frozenset[str] = frozenset()


def test_every_nemesis_once_finds_no_anomaly_and_no_stall(tmp_path: Path) -> None:
    run_id = free_run_id(201, 250)  # another `make test` on this machine holds its own
    result = run(Options(seconds=0, nemeses=tuple(NEMESES), workloads=WORKLOADS, seed=22, fault_s=3.0,
                         heal_s=3.0, out=tmp_path / "report", run_id=run_id, keep_data=True))
    summary = (result.report / "summary.txt").read_text()
    unexplained = [a for a in result.verdict.anomalies if a.kind not in OPEN_BUGS]
    assert not unexplained, summary
    assert not result.verdict.stalls(STALL_S), summary
    figures = json.loads((result.report / "report.json").read_text())
    assert figures["faults_per_nemesis"] == {name: 1 for name in sorted(NEMESES)}, summary
    assert figures["acknowledged_writes"] > 500 and figures["values_read"] > 500, summary
    logs = figures["broker_logs"]  # kill, kill-restart and kill-long each start a broker uncleanly
    assert logs["tracebacks"] == 0 and logs["unclean_starts"] >= 3, summary
    ops = result.history.ops
    committed = Counter(op.process for op in ops if op.kind == Kind.TXN and op.outcome == Outcome.OK)
    assert all(committed[p] >= 10 for p in ("t1", "x1", "j1", "jx")), (committed, summary)
    assert (result.report / "timeline.png").stat().st_size > 10_000
    stored_twice = (result.report / "stored-twice.txt").read_text()
    assert stored_twice.count("values stored twice") == 9, stored_twice  # 3 brokers, 3 partitions
    mates = batch_mates(result.report / "data" / "n1", ["txn-0"])  # as an aborted read is looked up
    assert mates and all(value in batch for value, batch in mates.items()), sorted(mates)[:5]
    assert any(len(batch) > 1 for batch in mates.values()), "no batch of txn-0 holds two values"
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"{PREFIX}{run_id}-" not in left, left
