"""`python -m tests.differential.generated fuzz --seed S --steps N` (make differential-fuzz):
generated sequences against a fresh Apache Kafka and a fresh Gregor, each difference shrunk
and written as a case file, the coverage summary at the end; `replay CASE` (make
differential-replay) plays one case file and prints every step's answers."""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from pathlib import Path

from tests.differential.conftest import started_pair
from tests.differential.generated.actions import pause_after, settle, to_step
from tests.differential.generated.play import (
    Coverage,
    Finding,
    Ports,
    fresh_sides,
    play,
    read_case,
    sequences,
    set_up,
    shrink,
    write_case,
)
from tests.differential.runner import api_name, unaccepted
from tests.integration.harness import own_code_first


def fuzz(ports: Ports, seed: int, steps: int, length: int, out: Path, shrink_s: float) -> int:
    coverage = Coverage()
    seen: dict[tuple[str, tuple[str, ...]], Path] = {}
    started = time.monotonic()
    for origin, actions in sequences(seed, steps, length):
        coverage.sequences += 1
        found = play(actions, ports, coverage)
        if found is None:
            continue
        coverage.findings += 1
        print(f"== {origin}: differs", *found.lines(), sep="\n", flush=True)
        if found.signature in seen:
            print(f"   (the same difference as {seen[found.signature]})", flush=True)
            continue
        seen[found.signature] = _shrunk(ports, actions, found, origin, out, shrink_s)
    print(f"\n{time.monotonic() - started:.0f} s", *coverage.summary(), sep="\n")
    print("\ndifferences:", *(f"  {a} {p}: {path}" for (a, p), path in seen.items()), sep="\n")
    return 1 if seen else 0


def _shrunk(ports: Ports, actions: list[dict], found: Finding, origin: str, out: Path, budget: float) -> Path:
    small, small_found = shrink(actions, found, ports, budget)
    path = out / f"case-{origin.replace('/', '-')}.json"
    write_case(path, small, small_found, origin)
    print(f"   shrunk to {len(small)} actions: {path}", *small_found.lines(), sep="\n", flush=True)
    return path


def replay(ports: Ports, case: Path) -> int:
    """Every step's answers printed; exit 1 when one differs."""
    actions = read_case(case)
    with fresh_sides(ports) as (kafka, gregor):
        set_up(kafka, gregor)
        for n, act in enumerate(actions):
            step = to_step(act)
            k_resp, g_resp = step.send(kafka), step.send(gregor)
            bad, k_tree, g_tree = unaccepted(step, kafka, gregor, k_resp, g_resp)
            print(f"step {n}: {api_name(step.api_key)} v{step.at()} {act}")
            print(f"  kafka:  {k_tree}\n  gregor: {g_tree}")
            if bad:
                print("  DIFFERS:", *bad, sep="\n    ")
                return 1
            time.sleep(pause_after(act))
            if settle(kafka) or settle(gregor):
                print("  a transaction never completes:", settle(kafka, 0), settle(gregor, 0))
                return 1
    print("no difference")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.differential.generated")
    sub = parser.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fuzz")
    f.add_argument("--seed", type=int, default=1)
    f.add_argument("--steps", type=int, default=2000)
    f.add_argument("--length", type=int, default=40, help="actions per sequence")
    f.add_argument("--out", type=Path, default=Path("differential-cases"))
    f.add_argument("--shrink-seconds", type=float, default=300.0)
    r = sub.add_parser("replay")
    r.add_argument("case", type=Path)
    args = parser.parse_args(argv)
    own_code_first()
    # a stopped run still stops its brokers (the context managers below)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory(prefix="difgen-") as tmp:
        base = Path(tmp)
        for d in ("kafka", "gregor"):
            (base / d).mkdir()
        with started_pair(base / "kafka", base / "gregor") as both:
            ports = Ports(both.kafka.port, both.gregor.port)
            if args.command == "replay":
                return replay(ports, args.case)
            return fuzz(ports, args.seed, args.steps, args.length, args.out, args.shrink_seconds)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
