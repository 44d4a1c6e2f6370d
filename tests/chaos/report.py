"""A campaign's report, read the way Jepsen's are: `report.json` (everything), `summary.txt`
(one page: operations, faults per nemesis, anomalies, recovery after each kind of fault, what
the brokers' logs say: tests.chaos.brokerlogs) and `timeline.png` (faults as bands;
acknowledged writes, reads and errors per second, and write latency over time). Each stall
says what its slowest process saw meanwhile (the history's notes: errors, exceptions,
rebalances, empty polls, counted)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import asdict
from pathlib import Path
from statistics import median
from typing import Any

from tests.chaos import brokerlogs
from tests.chaos.checker import DRAIN, Recovery, Verdict
from tests.chaos.history import History, Kind, Note, Op, Outcome

ANOMALIES_SHOWN = 50
SAW_SHOWN = 8  # the kinds of note shown per stall, most frequent first
STALL_S = 60.0  # a recovery longer than this (or none, watched for longer) is a stall


def write_report(out: Path, history: History, verdict: Verdict, seed: int) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    history.save(out / "history.json")  # to check again: History.load + checker.check
    figures = {**summary_figures(history, verdict, seed), "broker_logs": brokerlogs.read_dir(out).figures()}
    (out / "report.json").write_text(json.dumps({
        **figures, "anomalies": [asdict(a) for a in verdict.anomalies],
        "client_resends": [asdict(a) for a in verdict.client_resends],
        "client_carryovers": [asdict(a) for a in verdict.client_carryovers],
        "client_reuses": [asdict(a) for a in verdict.client_reuses],
        "faults": [asdict(f) for f in history.faults],
        "recoveries": [_recovery_json(r) for r in verdict.recoveries],
    }, indent=1))
    (out / "summary.txt").write_text(summary_text(figures, verdict))
    timeline(history, out / "timeline.png")
    return out


def summary_figures(history: History, verdict: Verdict, seed: int) -> dict[str, Any]:
    ops = Counter(f"{op.kind}:{op.outcome}" for op in history.ops)
    return {
        "seed": seed, "valid": verdict.valid, "operations": len(history.ops),
        "operations_by_outcome": dict(sorted(ops.items())), "acknowledged_writes": verdict.ok_writes,
        "values_read": verdict.reads,
        "faults_per_nemesis": dict(sorted(Counter(f.nemesis for f in history.faults).items())),
        "anomalies_per_kind": verdict.counts(),
        "client_resend_duplicates": len(verdict.client_resends),  # not anomalies: see checker.set_apart
        "client_carryover_reads": len(verdict.client_carryovers),  # nor these: see checker.carried_over
        "client_reuse_anomalies": len(verdict.client_reuses),  # nor these: checker.reused_sequences
        "write_interleavings": verdict.interleavings,  # allowed: see tests.chaos.checker
        "recovery_s_per_nemesis": _recovery_by_nemesis(verdict.recoveries),
        "worst_recovery": _worst(verdict.recoveries),
        f"stalls_over_{int(STALL_S)}s": [_stall_json(r, history) for r in verdict.stalls(STALL_S)],
        f"outages_over_{int(STALL_S)}s": len(verdict.outages(STALL_S)),
        "notes_per_process": _notes_by_process(history.notes),
    }


def _recovery_json(r: Recovery) -> dict[str, Any]:
    return {"nemesis": r.fault.nemesis, "target": r.fault.target, "healed_s": round(r.fault.stop_s, 3),
            "topic": r.topic, "producers_s": r.producers_s, "consumers_s": r.consumers_s,
            "watched_s": round(r.watched_s, 2), "slowest": r.slowest}


def _stall_json(r: Recovery, history: History) -> dict[str, Any]:
    """A stall, and what its slowest process saw from the heal until it progressed again (or
    the end)."""
    healed = r.fault.stop_s
    return {**_recovery_json(r), "saw": saw(history.notes_of(r.slowest, healed, healed + r.took_s), healed)}


def saw(notes: list[Note], since_s: float) -> list[str]:
    """Notes summed by what and name, most frequent first: `consume _TRANSPORT x12 (+0-31 s:
    the first's detail)`, seconds counted from `since_s`."""
    found: dict[tuple[str, str], list[Note]] = defaultdict(list)
    for n in notes:
        found[(n.what, n.name)].append(n)
    ranked = sorted(found.items(), key=lambda kv: -sum(n.count for n in kv[1]))
    return [f"{what} {name} x{sum(n.count for n in ns)} (+{max(0, ns[0].at_s - since_s):.0f}-"
            f"{max(0, ns[-1].at_s - since_s):.0f} s: {ns[0].detail})"
            for (what, name), ns in ranked[:SAW_SHOWN]]


def _notes_by_process(notes: list[Note]) -> dict[str, dict[str, int]]:
    found: dict[str, Counter[str]] = defaultdict(Counter)
    for n in notes:
        found[n.process][f"{n.what} {n.name}"] += n.count
    return {p: dict(c.most_common()) for p, c in sorted(found.items())}


def _worst(recoveries: tuple[Recovery, ...]) -> dict[str, Any] | None:
    """The longest recovery that did happen (the ones that never did are in the stalls)."""
    done = [(max(t for t in (r.producers_s, r.consumers_s) if t is not None), r) for r in recoveries
            if r.producers_s is not None or r.consumers_s is not None]
    if not done:
        return None
    took, r = max(done, key=lambda d: d[0])
    return {**_recovery_json(r), "took_s": round(took, 2)}


def _recovery_by_nemesis(recoveries: tuple[Recovery, ...]) -> dict[str, dict[str, Any]]:
    """Per nemesis and topic: median and max seconds to progress again, and how many times
    it never did before the run ended."""
    found: dict[str, list[Recovery]] = defaultdict(list)
    for r in recoveries:
        found[f"{r.fault.nemesis} {r.topic}"].append(r)
    return {name: _spread(rs) for name, rs in sorted(found.items())}


def _spread(rs: list[Recovery]) -> dict[str, Any]:
    times = [t for r in rs for t in (r.producers_s, r.consumers_s) if t is not None]
    produced = [r.producers_s for r in rs if r.producers_s is not None]
    consumed = [r.consumers_s for r in rs if r.consumers_s is not None]
    return {"producers_median_s": round(median(produced), 2) if produced else None,
            "consumers_median_s": round(median(consumed), 2) if consumed else None,
            "max_s": round(max(times, default=0.0), 2),
            "never": sum(1 for r in rs for t in (r.producers_s, r.consumers_s) if t is None)}


def summary_text(figures: dict[str, Any], verdict: Verdict) -> str:
    lines = [f"Gregor chaos campaign (seed {figures['seed']}): "
             f"{'VALID' if verdict.valid else 'ANOMALIES FOUND'}",
             f"operations {figures['operations']}: {figures['operations_by_outcome']}",
             f"acknowledged writes {figures['acknowledged_writes']}, values read {figures['values_read']}",
             "faults per nemesis: " + ", ".join(f"{k} {v}" for k, v in figures["faults_per_nemesis"].items()),
             "anomalies: " + ", ".join(f"{k} {v}" for k, v in figures["anomalies_per_kind"].items()),
             "duplicates the client made, sending a value again under a new producer epoch (the kept "
             f"data shows it; no broker can tell them apart): {figures['client_resend_duplicates']}",
             "aborted reads the client made, sending an aborted transaction's value again in its next "
             "committed one (the kept data shows one batch holding both): "
             f"{figures['client_carryover_reads']}",
             "anomalies the client made, sending a committed transaction's values with an aborted "
             "batch's sequences, which the broker answered as that batch's duplicate (the kept data "
             f"shows the aborted batch at the acknowledged offsets): {figures['client_reuse_anomalies']}",
             f"cycles only concurrent transactions' interleaved writes make (allowed in Kafka's model): "
             f"{figures['write_interleavings']}",
             f"worst recovery: {figures['worst_recovery']}",
             f"stalls (no progress for over {int(STALL_S)} s after a heal): "
             f"{len(figures[f'stalls_over_{int(STALL_S)}s'])}, in "
             f"{figures[f'outages_over_{int(STALL_S)}s']} outages (a process stuck across several "
             "heals stalls after each; one outage)",
             "every producer and consumer progressing again on its partitions after the fault healed "
             "(median s of the slowest, producers / consumers; max; never before the end):"]
    for name, r in figures["recovery_s_per_nemesis"].items():
        lines.append(f"  {name:28} {r['producers_median_s']} / {r['consumers_median_s']}; "
                     f"max {r['max_s']}; never {r['never']}")
    lines += [f"  stall: {r}" for r in figures[f"stalls_over_{int(STALL_S)}s"]]
    lines += brokerlogs.text(figures["broker_logs"])
    lines += [f"  {a.kind}: {a.detail}" for a in verdict.anomalies[:ANOMALIES_SHOWN]]
    lines += [f"  client re-send: {a.detail}" for a in verdict.client_resends[:ANOMALIES_SHOWN]]
    lines += [f"  client carry-over: {a.detail}" for a in verdict.client_carryovers[:ANOMALIES_SHOWN]]
    lines += [f"  client sequence reuse, {a.kind}: {a.detail}"
              for a in verdict.client_reuses[:ANOMALIES_SHOWN]]
    return "\n".join(lines) + "\n"


def timeline(history: History, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = min([op.invoke_s for op in history.ops] + [f.start_s for f in history.faults], default=0.0)
    fig, (rate, latency) = plt.subplots(2, 1, figsize=(14, 7), sharex=True)
    for name, series in _per_second(history.ops, t0).items():
        rate.plot(sorted(series), [series[s] for s in sorted(series)], label=name, linewidth=1)
    sends = [op for op in history.ops if op.kind in (Kind.SEND, Kind.TXN) and op.outcome == Outcome.OK]
    latency.scatter([op.invoke_s - t0 for op in sends],
                    [1000 * (op.complete_s - op.invoke_s) for op in sends], s=2)
    latency.set_yscale("log")
    for axis in (rate, latency):
        _bands(axis, history, t0)
    rate.set_ylabel("per second")
    latency.set_ylabel("ms")
    latency.set_xlabel("seconds since the start")
    rate.legend(loc="upper left", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _per_second(ops: list[Op], t0: float) -> dict[str, dict[int, int]]:
    series: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for op in ops:
        second = int(op.complete_s - t0)
        if op.kind in (Kind.SEND, Kind.TXN):
            series[f"{op.kind} {op.outcome}"][second] += 1
        elif op.kind == Kind.POLL and op.process != DRAIN:
            series["values read"][second] += len(op.reads)
    return series


def _bands(axis: Any, history: History, t0: float) -> None:
    for i, fault in enumerate(history.faults):
        axis.axvspan(fault.start_s - t0, fault.stop_s - t0, color=f"C{i % 10}", alpha=0.15)
        axis.text(fault.start_s - t0, 1.0, fault.nemesis, rotation=90, fontsize=6, va="top",
                  transform=axis.get_xaxis_transform())
