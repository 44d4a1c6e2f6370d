"""The committed baseline of `make bench` (bench/baseline.json) and the REGRESSION verdict.

A row is named, and measured in one figure where higher is better (transactions/s, MiB/s,
records/s). What a row is judged on is what a slower machine or a noisy minute cancels out of:

- Gregor's speed relative to Apache Kafka measured in the same run (`vs_kafka`, >1: Gregor is
  faster), on a row Kafka ran; the absolute figures are in the table for reference only;
- Gregor's figure itself (`figure`) only on a row without Kafka in this run (a Gregor-only
  benchmark, or a row Kafka failed);
- and, where the row measured it, Gregor's broker CPU per operation (`cpu_ms`: ms of CPU per
  transaction or per MiB), which must not grow.

A ratio or figure more than TOLERANCE below its baseline, or a CPU per operation more than
TOLERANCE above its baseline, is a REGRESSION; a benchmark that found one exits non-zero. A
baseline row written before ratios were recorded is a bare number, its figure. The baseline
changes only deliberately: `--update-baseline` rewrites the rows of that benchmark, and the
commit says why.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

BASELINE = Path(__file__).resolve().parent / "baseline.json"
TOLERANCE = 0.25


@dataclass(frozen=True, slots=True)
class Measured:
    """One row of Gregor's, as judged: its figure, its ratio to Kafka and its CPU per operation
    (None: not measured in this run)."""

    figure: float | None = None
    vs_kafka: float | None = None
    cpu_ms: float | None = None

    @staticmethod
    def of(entry: float | dict[str, float]) -> Measured:
        """A baseline.json row: a bare number is a figure (the baseline before ratios)."""
        return Measured(figure=entry) if isinstance(entry, int | float) else Measured(**entry)

    def entry(self) -> dict[str, float]:
        return {k: round(v, 3 if k != "figure" else 1) for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True, slots=True)
class Verdict:
    baseline: Measured | None

    def checks(self, m: Measured) -> list[tuple[str, float, float, bool]]:
        """(what, measured, baseline, lower is worse) of each comparison the baseline allows."""
        b = self.baseline or Measured()
        found = []
        if m.vs_kafka is not None:
            if b.vs_kafka is not None:
                found.append(("ratio to Kafka", m.vs_kafka, b.vs_kafka, True))
        elif m.figure is not None and b.figure is not None:
            found.append(("figure", m.figure, b.figure, True))
        if m.cpu_ms is not None and b.cpu_ms is not None:
            found.append(("CPU per op", m.cpu_ms, b.cpu_ms, False))
        return found

    def regressed(self, m: Measured) -> bool:
        return any(_worse(value, base, lower) for _what, value, base, lower in self.checks(m))

    def text(self, m: Measured) -> str:
        checks = self.checks(m)
        if not checks:
            return "no baseline" + (" ratio" if m.vs_kafka is not None else "")
        parts = [f"{what} {value / base:.2f}x baseline" for what, value, base, _lower in checks if base]
        return ", ".join(parts) + ("  REGRESSION" if self.regressed(m) else "")


def _worse(value: float, base: float, lower_is_worse: bool) -> bool:
    return value < base * (1 - TOLERANCE) if lower_is_worse else value > base * (1 + TOLERANCE)


def load(benchmark: str) -> dict[str, Measured]:
    """The baseline rows of one benchmark (empty when it has none yet)."""
    if not BASELINE.exists():
        return {}
    rows: dict[str, float | dict[str, float]] = json.loads(BASELINE.read_text()).get(benchmark, {})
    return {row: Measured.of(entry) for row, entry in rows.items()}


def verdict(benchmark: str, row: str) -> Verdict:
    return Verdict(load(benchmark).get(row))


def update(benchmark: str, rows: dict[str, Measured]) -> None:
    """Replace the benchmark's baseline rows with `rows` (others are kept)."""
    data = json.loads(BASELINE.read_text()) if BASELINE.exists() else {}
    data[benchmark] = {name: m.entry() for name, m in sorted(rows.items())}
    BASELINE.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
