"""The notes' lock cannot stop the clients or the history (seed 122: the lock stayed taken with
no live thread in a note, every client thread waited in its next note, and the history, saved
under the same lock, never was)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from tests.chaos import workload


def taken_by_a_thread_that_ended(rec: workload.Recorder) -> None:
    taker = threading.Thread(target=rec._lock.acquire, name="taker")
    taker.start()
    taker.join()


def test_a_note_gives_up_on_a_lock_left_taken_and_the_history_is_saved(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rec = workload.Recorder(note_wait_s=0.1)
    rec.note("p1", "producer error", "_TRANSPORT", "before")
    taken_by_a_thread_that_ended(rec)
    began = time.monotonic()
    rec.note("p1", "producer error", "_TRANSPORT", "after")
    rec.note("p2", "producer error", "_TRANSPORT", "after")
    assert time.monotonic() - began < 5
    rec.save(tmp_path / "history.json")
    notes = json.loads((tmp_path / "history.json").read_text())["notes"]
    assert [(n["process"], n["detail"]) for n in notes] == [("p1", "before")]
    told = capsys.readouterr().err
    assert told.count("the notes' lock is held (<locked _thread.RLock object owner=") == 1, told
    assert "p1's note producer error _TRANSPORT dropped" in told


def test_a_note_made_while_its_own_thread_is_in_one_is_kept() -> None:
    rec = workload.Recorder(note_wait_s=0.1)
    with rec._lock:  # as a callback that comes while this thread is in a note
        rec.note("tc", "consumer error", "_TRANSPORT", "inside")
    rec.note("tc", "consumer error", "_TRANSPORT", "outside")
    assert [n.count for n in rec._notes.notes()] == [2]
