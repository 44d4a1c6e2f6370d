"""A campaign holds its run id while it runs: a second campaign given the same id stops with
one line instead of sweeping away the first one's namespaces (two `make test` on one machine
did, each failing the other's short campaign)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.chaos import netns
from tests.chaos.netns import RunIdTaken, claim, free_run_id


@pytest.fixture(autouse=True)
def claims_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netns, "CLAIMS", tmp_path)


def test_a_held_run_id_is_refused_with_its_holder_and_free_again_after() -> None:
    held = rf"run id 7 is in use by another campaign \(pid {os.getpid()}\)"
    with claim(7):
        with pytest.raises(RunIdTaken, match=held), claim(7):
            pass
        with claim(8):  # another id is free
            pass
    with claim(7):
        pass


def test_the_first_free_run_id_skips_the_held_ones() -> None:
    with claim(201), claim(202):
        assert free_run_id(201, 250) == 203
    assert free_run_id(201, 250) == 201


def test_every_run_id_held_is_said() -> None:
    with claim(201), pytest.raises(AssertionError, match="every run id from 201 to 201 is in use"):
        free_run_id(201, 201)


def test_a_killed_holder_leaves_its_run_id_free(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from pathlib import Path; from tests.chaos import netns\n"
         f"netns.CLAIMS = Path({str(tmp_path)!r})\n"
         "with netns.claim(9):\n    print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(RunIdTaken, match=rf"pid {holder.pid}"):
            with claim(9):
                pass
    finally:
        holder.kill()
        holder.communicate()
    with claim(9):
        pass
