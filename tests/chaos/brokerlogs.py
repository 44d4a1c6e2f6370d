"""What the brokers' logs of a run say (kept in its report dir as n1.log, n2.log, ...): how long
each unclean start took, from "no clean-shutdown marker" to "serving on"; tracebacks (none is
expected: an expected condition logs one line); failed starts (the one line `gregor: ...` a
broker prints when it exits at start-up, as on a full disk); the controller epochs announced
and any missing among them (an epoch whose winner died before it said so leaves one); and the
ERROR lines by kind. Read by the report, so that a long run's log facts come with its verdict
instead of by hand."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from statistics import median
from typing import Any

UNCLEAN = "no clean-shutdown marker"
SERVING = re.compile(r" INFO broker\.server: broker \d+ serving on ")
CONTROLLER = re.compile(r"is now the controller \(epoch (\d+)\)")
START_FAILED = "gregor: "  # at a line's start: the one line of a start-up that failed
ERROR = re.compile(r"^\S+ \S+ ERROR (.*)$")
KINDS_SHOWN = 10


@dataclass(frozen=True, slots=True)
class LogFacts:
    unclean_starts_s: tuple[float, ...]  # each unclean start's seconds to serving, in log order
    tracebacks: int
    start_failures: int
    controller_epochs: frozenset[int]
    errors_by_kind: dict[str, int]

    def epoch_gaps(self) -> list[int]:
        """Epochs below the highest announced that no broker announced."""
        return sorted(set(range(1, max(self.controller_epochs, default=0) + 1)) - self.controller_epochs)

    def figures(self) -> dict[str, Any]:
        starts = self.unclean_starts_s
        return {
            "unclean_starts": len(starts),
            "unclean_start_median_s": round(median(starts), 1) if starts else None,
            "unclean_start_max_s": round(max(starts), 1) if starts else None,
            "tracebacks": self.tracebacks, "start_failures": self.start_failures,
            "controller_epochs": len(self.controller_epochs), "controller_epoch_gaps": self.epoch_gaps(),
            "error_lines": sum(self.errors_by_kind.values()), "errors_by_kind": self.errors_by_kind,
        }


def read_dir(out: Path) -> LogFacts:
    return read_logs(log.read_text(errors="replace") for log in sorted(out.glob("n*.log")))


def read_logs(texts: Iterable[str]) -> LogFacts:
    starts: list[float] = []
    tracebacks = start_failures = 0
    epochs: set[int] = set()
    errors: Counter[str] = Counter()
    for text in texts:
        unclean_at: datetime | None = None  # per broker: its unclean start not yet serving
        for line in text.splitlines():
            tracebacks += line.startswith("Traceback (most recent call last)")
            start_failures += line.startswith(START_FAILED)
            if (won := CONTROLLER.search(line)) is not None:
                epochs.add(int(won.group(1)))
            if (error := ERROR.match(line)) is not None:
                errors[error_kind(error.group(1))] += 1
            if UNCLEAN in line:
                unclean_at = _at(line)
            elif unclean_at is not None and SERVING.search(line):
                starts.append((_at(line) - unclean_at).total_seconds())
                unclean_at = None
    return LogFacts(tuple(starts), tracebacks, start_failures, frozenset(epochs), dict(errors.most_common()))


def error_kind(message: str) -> str:
    """An ERROR line's message with what varies between lines of one kind (partitions, numbers,
    paths) taken out."""
    kind = re.sub(r"partition \S+?-\d+", "partition P", message)
    kind = re.sub(r"/\S+", "PATH", kind)
    return re.sub(r"\d+", "N", kind)[:160]


def text(f: dict[str, Any]) -> list[str]:
    """The summary's lines, from `LogFacts.figures`."""
    starts = (f"{f['unclean_starts']} unclean starts ({f['unclean_start_median_s']} s median, "
              f"{f['unclean_start_max_s']} s at most)" if f["unclean_starts"] else "no unclean start")
    gaps = f["controller_epoch_gaps"]
    lines = [f"broker logs: {starts}; tracebacks {f['tracebacks']}; failed starts {f['start_failures']}; "
             f"controller epochs {f['controller_epochs']} ({f'missing {gaps}' if gaps else 'none missing'}); "
             f"ERROR lines {f['error_lines']}"]
    return lines + [f"  {count:6d} {kind}" for kind, count in list(f["errors_by_kind"].items())[:KINDS_SHOWN]]


def _at(line: str) -> datetime:
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
