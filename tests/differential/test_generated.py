"""Generated sequences (tests/differential/generated) at a fixed seed and a small budget: each
sequence sent to Kafka and to Gregor in lock-step on the suite's pair, answers compared as every
case's are. A difference fails with the sequence shrunk and written as a case file
(`make differential-replay CASE=…`); `make differential-fuzz SEED=… N=…` runs longer."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.differential.conftest import Pair
from tests.differential.generated.model import LEFT_OUT
from tests.differential.generated.play import GENERATED, Ports, play, sequences, shrink, write_case

SEED = 63
STEPS = 800  # about 30 s on the suite's brokers, with another run beside it on two cores
LENGTH = 40
SHRINK_S = 60.0
LEFT = frozenset(LEFT_OUT)  # kinds whose differences are known and not fixed (none now); fuzz runs them


def origins() -> list[str]:
    return [origin for origin, _ in sequences(SEED, STEPS, LENGTH, LEFT)]


@pytest.mark.parametrize("origin", origins())
def test_sequence(origin: str, pair: Pair, tmp_path: Path) -> None:
    actions = dict(sequences(SEED, STEPS, LENGTH, LEFT))[origin]
    ports = Ports(pair.kafka.port, pair.gregor.port)
    GENERATED.sequences += 1
    found = play(actions, ports, GENERATED)
    if found is None:
        return
    GENERATED.findings += 1
    small, small_found = shrink(actions, found, ports, SHRINK_S)
    case = tmp_path / f"case-{origin.replace('/', '-')}.json"
    write_case(case, small, small_found, origin)
    pytest.fail("\n".join([
        f"sequence {origin}: Kafka and Gregor answer differently", *found.lines(),
        f"shrunk to {len(small)} actions ({case}; make differential-replay CASE={case}):",
        *(f"  {a}" for a in small), *small_found.lines(),
    ]))
