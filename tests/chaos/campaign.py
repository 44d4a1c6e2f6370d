"""A campaign: the cluster on its hosts, the workload on the clients' host, the nemeses in a
seeded order (each: start, hold, stop, heal), then the history checked and reported.

    python -m tests.chaos.campaign --seconds 600 --nemeses all --workload all --seed 7 \\
        --out chaos-report                                   (what `make chaos` runs)

With `--tally tests/chaos/tally.json` the run adds its faults and anomalies to the tally of
long runs (tests.chaos.tally) and prints the totals. With `--keep-data` the brokers' data dirs
are kept and read (tests.chaos.evidence): a duplicate they show the client sent again under a
new producer epoch, and an aborted transaction's value they show the client sent again in its
next committed transaction, are reported apart from the anomalies. `--recheck OUT` checks a
kept run again with this checker and rewrites its report.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.chaos.checker import (
    Verdict,
    carried_over,
    check,
    partitions_of,
    reused_sequences,
    set_apart,
)
from tests.chaos.evidence import StoredTwice, batch_mates, client_resends, describe, duplicates, records
from tests.chaos.history import Fault, History
from tests.chaos.hosts import ChaosCluster
from tests.chaos.nemesis import NEMESES, Nemesis
from tests.chaos.netns import RunIdTaken, claim, sweep
from tests.chaos.report import write_report
from tests.chaos.tally import add, run_entry, text
from tests.chaos.transactions import JAVA_WORKLOADS, java_missing
from tests.chaos.workload import DRAIN_LIMIT_S, QUEUE, STOP_S, WORKLOADS

# From the stop file until the clients have stopped, drained and saved the history: their own
# bounds, and the writing of a history of two hours (a million operations; over 50 s on the
# loaded machine of seed 99, whose 360 s in all ran out before it was written).
SAVE_S = 240
DRAIN_WAIT_S = STOP_S + DRAIN_LIMIT_S + SAVE_S
# Then, terminated, until they have saved what they have: a history of a million operations
# takes longer than 30 s to write on a loaded machine (seeds 97 and 99 had none).
TERMINATED_WAIT_S = 120
SETTLE_S = 60  # from the last heal until etcd must show the cluster whole (restarts take up to 40 s)


@dataclass(frozen=True, slots=True)
class Options:
    seconds: float  # at least one round of every nemesis; more rounds until this has passed
    nemeses: tuple[str, ...]
    workloads: tuple[str, ...] = ("queue", "txn")
    seed: int = 1
    fault_s: float = 4.0  # longer than the session and lag timeouts (2 s)
    heal_s: float = 4.0
    out: Path = Path("chaos-report")
    run_id: int = 1  # the third byte of the hosts' addresses, namespaces gch<run_id>-*
    keep_data: bool = False  # data dirs copied to <out>/data, values stored twice to stored-twice.txt


class NoHistory(Exception):
    """The clients ended without a history: the run has no verdict."""


@dataclass(frozen=True, slots=True)
class Result:
    history: History
    verdict: Verdict
    report: Path


def run(options: Options) -> Result:
    unknown = set(options.workloads) - set(WORKLOADS)
    assert not unknown, f"unknown workloads {sorted(unknown)}; known: {', '.join(WORKLOADS)}"
    missing = java_missing() if set(options.workloads) & set(JAVA_WORKLOADS) else None
    assert missing is None, missing
    options.out.mkdir(parents=True, exist_ok=True)
    with claim(options.run_id):
        history, code, failure, kept = _on_hosts(options)
    history.save(options.out / "history.json")  # before the check: a checker that fails loses nothing
    verdict = _set_apart(check(history), history, client_resends(kept), options.out)
    result = Result(history, verdict, write_report(options.out, history, verdict, options.seed))
    if failure is not None:  # checked and reported first: what the run saw until then counts
        raise failure
    assert code == 0, f"the clients exited with {code} (see {options.out / 'clients.log'})"
    return result


def _on_hosts(options: Options) -> tuple[History, int, Exception | None, list[StoredTwice]]:
    """The run on its hosts (first swept of what a killed run of the same id left), then its
    logs and, with keep_data, its data dirs kept, the hosts torn down."""
    sweep(options.run_id)
    with tempfile.TemporaryDirectory(prefix="gregor-chaos-") as base:
        cluster = ChaosCluster(Path(base), options.run_id)
        kept: list[StoredTwice] = []
        try:
            history, code, failure = _drive(cluster, options, Path(base))
        finally:
            _keep_logs(cluster, options.out)
            if options.keep_data:
                kept = _keep_data(cluster, Path(base), options.out)
            cluster.close()
    return history, code, failure, kept


def _drive(cluster: ChaosCluster, options: Options, base: Path) -> tuple[History, int, Exception | None]:
    """The history (reported even when a client failed), the clients' exit code, and what
    stopped the faults early if anything did (e.g. a broker that did not start again: the
    clients still drain and the history is still checked)."""
    out, stop_file = base / "history.json", base / "stop"
    faults: list[Fault] = []
    failure: Exception | None = None
    with open(options.out / "clients.log", "wb") as log:
        clients = cluster.client("-m", "tests.chaos.workload", cluster.bootstrap, str(out), str(stop_file),
                                 "--workload", ",".join(options.workloads), "--seed", str(options.seed),
                                 stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    try:
        time.sleep(options.heal_s)  # the clients create their topics and start
        try:
            _schedule(cluster, options, faults)
            cluster.restore()
        except Exception as exc:
            failure = exc
            print(f"{time.monotonic():.1f} the faults stopped early: {exc!r}", flush=True)
            with contextlib.suppress(Exception):
                cluster.restore()
        time.sleep(options.heal_s)
        if failure is None:  # a cluster whose faults stopped early cannot be expected to settle
            failure = _settled_or_failure(cluster)
        stop_file.touch()
        print(f"{time.monotonic():.1f} faults done; the clients drain", flush=True)
        code = _wait(clients)
    finally:
        with contextlib.suppress(ProcessLookupError):  # the whole session: the workload, its JVM
            os.killpg(clients.pid, signal.SIGKILL)
    print(f"{time.monotonic():.1f} the clients ended", flush=True)
    if not out.exists():
        raise NoHistory(f"the clients saved no history (exit code {code}; see {options.out / 'clients.log'})")
    history = History.load(out)
    history.faults.extend(faults)
    return history, code, failure


def _settled_or_failure(cluster: ChaosCluster) -> Exception | None:
    left = _settle(cluster)
    if left is None:
        return None
    failure = AssertionError(f"the cluster did not settle within {SETTLE_S:g} s of the last heal: {left}")
    print(f"{time.monotonic():.1f} {failure}", flush=True)
    return failure


def _settle(cluster: ChaosCluster) -> str | None:
    """None once etcd shows the healed cluster whole (within SETTLE_S), else what is left."""
    deadline = time.monotonic() + SETTLE_S
    left = unsettled(cluster.view(), len(cluster.brokers))
    while left is not None and time.monotonic() < deadline:
        time.sleep(1)
        left = unsettled(cluster.view(), len(cluster.brokers))
    return left


def unsettled(view: dict[str, Any], brokers: int) -> str | None:
    """What keeps the cluster in `view` (tests.chaos.image) from being whole: every broker
    registered, a controller whose record its broker's lease holds, every partition led.
    Every run before 6527edb lost its controller minutes in and four of seed 95's
    partitions had no leader for its last 93 minutes, shown only as stalls."""
    if not view:
        return "etcd did not answer"
    if view["brokers"] != list(range(1, brokers + 1)):
        return f"registered brokers {view['brokers']}"
    if not view["controller_held"]:
        return f"the controller record (broker {view['controller']}) is not held by its broker's lease"
    leaderless = sorted(tp for tp, leader in view["leaders"].items() if leader < 0)
    return f"partitions without a leader: {', '.join(leaderless)}" if leaderless else None


def _wait(clients: subprocess.Popen[bytes], within_s: float = DRAIN_WAIT_S) -> int:
    """The clients' exit code once they drained; if they did not within `within_s`, they are
    terminated (SIGTERM: the workload saves the history it has, undrained) and fail."""
    try:
        return clients.wait(within_s)
    except subprocess.TimeoutExpired:
        print(f"{time.monotonic():.1f} the clients did not end within {within_s:g} s: terminated",
              flush=True)
        os.killpg(clients.pid, signal.SIGTERM)
        try:
            clients.wait(TERMINATED_WAIT_S)
        except subprocess.TimeoutExpired:
            pass  # killed by the caller; no history
        return -signal.SIGTERM


def _schedule(cluster: ChaosCluster, options: Options, faults: list[Fault]) -> None:
    """The nemeses in the seed's order, into `faults` as each ends (kept if one fails)."""
    rng = random.Random(options.seed)
    chosen = [NEMESES[n] for n in options.nemeses]
    deadline = time.monotonic() + options.seconds
    while not faults or time.monotonic() < deadline:
        for nemesis in rng.sample(chosen, len(chosen)):
            for exited in cluster.restart_exited():  # as a supervisor would
                print(f"{time.monotonic():.1f} {exited} had exited: started again", flush=True)
            _inject(cluster, nemesis, rng, options.fault_s, faults)
            time.sleep(options.heal_s)


def _inject(cluster: ChaosCluster, nemesis: Nemesis, rng: random.Random, hold_s: float,
            faults: list[Fault]) -> None:
    start = time.monotonic()
    target = nemesis.start(cluster, rng)
    print(f"{start:.1f} {nemesis.name} on {target}", flush=True)
    time.sleep(hold_s)
    try:
        nemesis.stop(cluster, target)
    finally:  # a fault whose stop failed happened too
        faults.append(Fault(nemesis.name, start, time.monotonic(), target))


def _keep_logs(cluster: ChaosCluster, out: Path) -> None:
    for name, broker in cluster.brokers.items():
        (out / f"{name}.log").write_text(broker.log_text())


def _keep_data(cluster: ChaosCluster, base: Path, out: Path) -> list[StoredTwice]:
    """The data dirs as the brokers left them (copied after they stopped, before the tmpfs go),
    and the queue's values each holds twice."""
    for broker in cluster.brokers.values():
        broker.close()
    for disk in sorted(base.glob("*-disk")):
        target = out / "data" / disk.name.removesuffix("-disk")
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(disk / "data", target, dirs_exist_ok=True)
    return _stored_twice(out)


def _stored_twice(out: Path) -> list[StoredTwice]:
    """Per kept data dir (OUT/data/*), the queue's values stored twice; written to
    OUT/stored-twice.txt."""
    kept = [(d.name, duplicates(d, QUEUE)) for d in sorted((out / "data").iterdir()) if d.is_dir()]
    lines = [f"{name} {line}" for name, found in kept for line in describe(found)]
    (out / "stored-twice.txt").write_text("\n".join(lines) + "\n")
    return [found for _, found in kept]


def _set_apart(verdict: Verdict, history: History, resent: set[str], out: Path) -> Verdict:
    """`verdict` with what the kept data dirs (OUT/data/*, if any) show the clients did set
    apart: `resent` duplicates, aborted reads the client carried into its next transaction, and
    what committed values sent with an aborted batch's sequences made."""
    kept = sorted(d for d in (out / "data").glob("*") if d.is_dir())
    partitions = partitions_of(history, verdict, "aborted-read")
    carried = carried_over(history, [batch_mates(d, partitions) for d in kept]) if partitions else set()
    lost_at = partitions_of(history, verdict, "lost-write")
    reused = reused_sequences(history, [records(d, lost_at) for d in kept]) if lost_at else set()
    return set_apart(verdict, resent, carried, reused)


def recheck(out: Path) -> Verdict:
    """A kept run (`--keep-data`) checked again by this checker; its report rewritten."""
    history = History.load(out / "history.json")
    seed = json.loads((out / "report.json").read_text())["seed"]
    verdict = _set_apart(check(history), history, client_resends(_stored_twice(out)), out)
    write_report(out, history, verdict, seed)
    return verdict


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--nemeses", default="all", help=f"comma-separated, of: {', '.join(NEMESES)}")
    parser.add_argument("--workload", default="all", help=f"all, or some of: {', '.join(WORKLOADS)}")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fault-seconds", type=float, default=4.0)
    parser.add_argument("--heal-seconds", type=float, default=4.0)
    parser.add_argument("--out", type=Path, default=Path("chaos-report"))
    parser.add_argument("--run-id", type=int, default=1, help="1-250: hosts 10.222.ID.*, namespaces gchID-*")
    parser.add_argument("--keep-data", action="store_true", help="copy the brokers' data dirs to OUT/data")
    parser.add_argument("--tally", type=Path, help="add the run to this tally (tests/chaos/tally.json)")
    parser.add_argument("--recheck", type=Path, metavar="OUT",
                        help="check a kept run (--keep-data) again, rewrite its report")
    args = parser.parse_args()
    if args.recheck is not None:
        verdict = recheck(args.recheck)
        print((args.recheck / "summary.txt").read_text())
        return 0 if verdict.valid else 1
    names = tuple(NEMESES) if args.nemeses == "all" else tuple(args.nemeses.split(","))
    unknown = [n for n in names if n not in NEMESES]
    if unknown:
        parser.error(f"unknown nemeses {unknown}; known: {', '.join(NEMESES)}")
    workloads = WORKLOADS if args.workload == "all" else tuple(args.workload.split(","))
    # A campaign stopped with SIGTERM (kill, a CI time-out) tears its hosts down like one that
    # ended: brokers, etcd, clients, namespaces and tmpfs (SIGTERM would skip the finally blocks).
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(143))
    try:
        result = run(Options(args.seconds, names, workloads, args.seed,
                             args.fault_seconds, args.heal_seconds, args.out, args.run_id, args.keep_data))
    except NoHistory as exc:  # one line: the reason, and where the clients said more
        print(f"no verdict: {exc}", file=sys.stderr)
        return 2
    except RunIdTaken as exc:
        print(f"campaign: {exc}", file=sys.stderr)
        return 2
    print((result.report / "summary.txt").read_text())
    if args.tally is not None:
        figures = json.loads((result.report / "report.json").read_text())
        print(text(add(args.tally, run_entry(figures, " ".join(sys.argv), time.time()))), end="")
    return 0 if result.verdict.valid else 1


if __name__ == "__main__":
    sys.exit(main())
