"""The end of a campaign: clients that do not stop are left behind within one deadline, and
clients that do not drain in time are terminated and still save the history they have (seed
87 lost its history: the clients did not end within the campaign's wait and were killed); a
fault whose stop fails is kept (seed 90: a broker that did not start again ended the run); the
healed cluster must be whole again (seed 95: no controller, four partitions without a leader)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.chaos.campaign import _inject, _wait, unsettled
from tests.chaos.history import Fault
from tests.chaos.nemesis import Nemesis
from tests.chaos.workload import _join
from tests.integration.harness import BrokerStartError

SAVES_ON_SIGTERM = """
import signal, sys, time
from pathlib import Path
from tests.chaos.workload import _terminated
signal.signal(signal.SIGTERM, _terminated)
try:
    Path(sys.argv[1] + ".started").touch()
    time.sleep(120)
finally:
    Path(sys.argv[1]).write_text("the history so far")
"""


def test_client_threads_are_joined_within_one_deadline_not_one_each() -> None:
    release = threading.Event()
    stuck = [threading.Thread(target=release.wait, daemon=True) for _ in range(3)]
    done = threading.Thread(target=lambda: None)
    for t in (*stuck, done):
        t.start()
    _join([*stuck, done], 0.3)  # three stuck threads: 0.3 s in all (they were given 60 s each)
    assert all(t.is_alive() for t in stuck) and not done.is_alive()
    release.set()


def test_clients_that_do_not_drain_in_time_are_terminated_and_save_their_history(tmp_path: Path) -> None:
    out = tmp_path / "history.json"
    with subprocess.Popen([sys.executable, "-c", SAVES_ON_SIGTERM, str(out)], cwd=Path(__file__).parents[3],
                          start_new_session=True, stderr=subprocess.PIPE) as clients:
        try:
            while not Path(f"{out}.started").exists() and clients.poll() is None:
                threading.Event().wait(0.05)
            assert _wait(clients, within_s=0.5) == -signal.SIGTERM
            assert out.read_text() == "the history so far"
            assert b"terminated by signal 15" in clients.stderr.read()  # type: ignore[union-attr]
            assert clients.returncode == 1
        finally:
            if clients.poll() is None:
                os.killpg(clients.pid, signal.SIGKILL)


def test_a_fault_whose_stop_fails_is_recorded_and_the_failure_raised() -> None:
    def start(_cluster: object, _rng: random.Random) -> str:
        return "n2"

    def stop(_cluster: object, _target: str) -> None:
        raise BrokerStartError("broker did not answer ApiVersions on 10.222.90.3:9092 within 40s")

    faults: list[Fault] = []
    with pytest.raises(BrokerStartError):
        _inject(None, Nemesis("kill-long", start, stop, "test"), random.Random(1), 0.0, faults)  # type: ignore[arg-type]
    assert [(f.nemesis, f.target) for f in faults] == [("kill-long", "n2")]


def whole(**changed: object) -> dict[str, object]:
    view: dict[str, object] = {"brokers": [1, 2, 3], "controller": 2, "controller_held": True,
                               "leaders": {"queue/0": 1, "queue/1": 2, "txn/0": 3}}
    return {**view, **changed}


def test_a_healed_cluster_is_settled_only_when_whole() -> None:
    """After the last heal the campaign waits for etcd to show every broker registered, a
    controller whose record its broker's lease holds and every partition led; seed 95's
    controller record held by no lease and its four leaderless partitions fail the run."""
    assert unsettled(whole(), 3) is None
    assert unsettled({}, 3) == "etcd did not answer"
    assert unsettled(whole(brokers=[1, 3]), 3) == "registered brokers [1, 3]"
    assert "not held by its broker's lease" in str(unsettled(whole(controller_held=False), 3))
    left = unsettled(whole(leaders={"queue/0": 1, "queue/1": -1, "ctp/2": -1}), 3)
    assert left == "partitions without a leader: ctp/2, queue/1"
