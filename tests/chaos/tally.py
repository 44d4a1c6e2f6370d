"""The progress towards the goal of issue 22, 1,000 faults of each kind across runs with no
anomaly: the long campaigns run since the last fix to the broker, in a small committed JSON
file (tests/chaos/tally.json), one entry a run with its faults per nemesis and anomalies.
A fix to the broker starts the tally again (`since` names the fix); only runs that happened
go in, each added from its report:

    python -m tests.chaos.tally tests/chaos/tally.json                  (the totals)
    python -m tests.chaos.tally tests/chaos/tally.json --add chaos-report --command "..."
    python -m tests.chaos.campaign ... --tally tests/chaos/tally.json   (adds itself at the end)
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tests.chaos.brokerlogs import read_dir
from tests.chaos.nemesis import NEMESES

GOAL = 1000
# What the tally keeps of a report's broker_logs (tests.chaos.brokerlogs).
LOG_FACTS = ("unclean_starts", "unclean_start_median_s", "unclean_start_max_s", "tracebacks",
             "start_failures", "controller_epoch_gaps", "error_lines")


def run_entry(figures: dict[str, Any], command: str, ended: float) -> dict[str, Any]:
    """A run as the tally keeps it, from its report's figures (report.json)."""
    faults = figures["faults_per_nemesis"]
    return {
        "ended": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime(ended)), "command": command,
        "seed": figures["seed"], "operations": figures["operations"],
        "acknowledged_writes": figures["acknowledged_writes"], "faults": sum(faults.values()),
        "faults_per_nemesis": faults,
        "anomalies_per_kind": {k: n for k, n in figures["anomalies_per_kind"].items() if n},
        "client_resend_duplicates": figures.get("client_resend_duplicates", 0),
        "client_carryover_reads": figures.get("client_carryover_reads", 0),
        "client_reuse_anomalies": figures.get("client_reuse_anomalies", 0),
        "stalls_over_60s": len(figures.get("stalls_over_60s", ())),
        "outages_over_60s": figures.get("outages_over_60s"),  # None: a report from before they were counted
        **({"broker_logs": _log_facts(figures["broker_logs"])} if "broker_logs" in figures else {}),
    }


def _log_facts(broker_logs: dict[str, Any]) -> dict[str, Any]:
    return {k: broker_logs[k] for k in LOG_FACTS}


def add(path: Path, entry: dict[str, Any]) -> dict[str, Any]:
    tally = json.loads(path.read_text())
    tally["runs"].append(entry)
    path.write_text(json.dumps(tally, indent=1) + "\n")
    return tally


def totals(tally: dict[str, Any]) -> tuple[Counter[str], Counter[str]]:
    """Faults per nemesis (every nemesis, zero if none) and anomalies per kind, over the runs."""
    faults: Counter[str] = Counter(dict.fromkeys(NEMESES, 0))
    anomalies: Counter[str] = Counter()
    for run in tally["runs"]:
        faults.update(run["faults_per_nemesis"])
        anomalies.update(run["anomalies_per_kind"])
    return faults, anomalies


def text(tally: dict[str, Any]) -> str:
    faults, anomalies = totals(tally)
    runs = tally["runs"]
    lines = [f"since {tally['since']}: {len(runs)} long run{'s' if len(runs) != 1 else ''}, "
             f"{sum(r['operations'] for r in runs):,} operations, {sum(faults.values()):,} faults; "
             "anomalies: "
             + (", ".join(f"{k} {n}" for k, n in sorted(anomalies.items())) or "none")
             + f"; duplicates the client made under a new producer epoch (not anomalies): "
               f"{sum(r.get('client_resend_duplicates', 0) for r in runs)}"
             + f"; aborted values the client sent again in its next transaction (nor these): "
               f"{sum(r.get('client_carryover_reads', 0) for r in runs)}"
             + f"; anomalies of committed values the client sent with an aborted batch's sequences "
               f"(nor these): {sum(r.get('client_reuse_anomalies', 0) for r in runs)}",
             *_logs_text(runs), f"faults per nemesis (goal {GOAL:,} each):"]
    lines += [f"  {name:20} {n:5} {'done' if n >= GOAL else f'{GOAL - n} to go'}"
              for name, n in sorted(faults.items())]
    return "\n".join(lines) + "\n"


def _logs_text(runs: list[dict[str, Any]]) -> list[str]:
    """What the brokers' logs of the runs that have them said, added up."""
    logs = [r["broker_logs"] for r in runs if "broker_logs" in r]
    if not logs:
        return []
    slowest = max(g["unclean_start_max_s"] or 0 for g in logs)
    return [f"the brokers' logs of {len(logs)} of them: {sum(g['unclean_starts'] for g in logs):,} "
            f"unclean starts (at most {slowest} s), {sum(g['tracebacks'] for g in logs)} tracebacks, "
            f"{sum(g['start_failures'] for g in logs)} failed starts, "
            f"{sum(len(g['controller_epoch_gaps']) for g in logs)} controller epochs missing"]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("tally", type=Path)
    parser.add_argument("--add", type=Path, metavar="REPORT_DIR", help="add the run whose report is there")
    parser.add_argument("--command", default="", help="the run's command line (with --add)")
    args = parser.parse_args()
    tally = json.loads(args.tally.read_text())
    if args.add is not None:
        report = args.add / "report.json"
        figures = json.loads(report.read_text())
        if "broker_logs" not in figures and any(args.add.glob("n*.log")):  # a report from before it read them
            figures["broker_logs"] = read_dir(args.add).figures()
        tally = add(args.tally, run_entry(figures, args.command, report.stat().st_mtime))
    print(text(tally), end="")


if __name__ == "__main__":
    main()
