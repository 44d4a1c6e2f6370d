"""The committed baseline of `make bench` (bench/baseline.json) and the REGRESSION verdict.

A row is named, and measured in one figure where higher is better (transactions/s,
MiB/s, records/s). A row more than TOLERANCE below its baseline is a REGRESSION; a
benchmark that found one exits non-zero. The baseline changes only deliberately:
`--update-baseline` rewrites the rows of that benchmark, and the commit says why.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

BASELINE = Path(__file__).resolve().parent / "baseline.json"
TOLERANCE = 0.25


@dataclass(frozen=True, slots=True)
class Verdict:
    baseline: float | None

    def ratio(self, value: float) -> float | None:
        return None if not self.baseline else value / self.baseline

    def regressed(self, value: float) -> bool:
        return self.baseline is not None and value < self.baseline * (1 - TOLERANCE)

    def text(self, value: float) -> str:
        ratio = self.ratio(value)
        if ratio is None:
            return "no baseline"
        return f"{ratio:.2f}x baseline" + ("  REGRESSION" if self.regressed(value) else "")


def load(benchmark: str) -> dict[str, float]:
    """The baseline rows of one benchmark (empty when it has none yet)."""
    if not BASELINE.exists():
        return {}
    rows: dict[str, float] = json.loads(BASELINE.read_text()).get(benchmark, {})
    return rows


def verdict(benchmark: str, row: str) -> Verdict:
    return Verdict(load(benchmark).get(row))


def update(benchmark: str, rows: dict[str, float]) -> None:
    """Replace the benchmark's baseline rows with `rows` (others are kept)."""
    data = json.loads(BASELINE.read_text()) if BASELINE.exists() else {}
    data[benchmark] = {name: round(value, 1) for name, value in sorted(rows.items())}
    BASELINE.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
