"""The tally of long chaos runs: a run's report figures added, the totals per nemesis."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.chaos.tally import add, main, run_entry, text, totals


def figures(faults: dict[str, int], anomalies: dict[str, int], resends: int = 0,
            carryovers: int = 0, reuses: int = 0) -> dict[str, object]:
    return {"seed": 7, "operations": 1000, "acknowledged_writes": 900, "faults_per_nemesis": faults,
            "anomalies_per_kind": {"lost-write": 0, **anomalies}, "client_resend_duplicates": resends,
            "client_carryover_reads": carryovers, "client_reuse_anomalies": reuses,
            "stalls_over_60s": [{}, {}], "outages_over_60s": 1}


def test_runs_add_up_per_nemesis(tmp_path: Path) -> None:
    path = tmp_path / "tally.json"
    path.write_text(json.dumps({"since": "abc1234", "runs": []}))
    add(path, run_entry(figures({"kill": 3, "pause": 2}, {}), "campaign --seed 7", 0.0))
    tally = add(path, run_entry(figures({"kill": 4}, {"duplicate": 2}, 3, 8, 11), "campaign --seed 8", 0.0))
    assert json.loads(path.read_text()) == tally
    assert tally["runs"][0] == {
        "ended": "1970-01-01T00:00Z", "command": "campaign --seed 7", "seed": 7, "operations": 1000,
        "acknowledged_writes": 900, "faults": 5, "faults_per_nemesis": {"kill": 3, "pause": 2},
        "anomalies_per_kind": {}, "client_resend_duplicates": 0, "client_carryover_reads": 0,
        "client_reuse_anomalies": 0, "stalls_over_60s": 2, "outages_over_60s": 1}
    faults, anomalies = totals(tally)
    assert (faults["kill"], faults["pause"], faults["ring"]) == (7, 2, 0) and anomalies == {"duplicate": 2}
    summary = text(tally)
    assert ("2 long runs, 2,000 operations, 9 faults; anomalies: duplicate 2; duplicates the client "
            "made under a new producer epoch (not anomalies): 3; aborted values the client sent again "
            "in its next transaction (nor these): 8; anomalies of committed values the client sent "
            "with an aborted batch's sequences (nor these): 11") in summary
    assert "kill                     7 993 to go" in summary


def test_the_brokers_logs_are_kept_and_added_up(tmp_path: Path) -> None:
    path = tmp_path / "tally.json"
    path.write_text(json.dumps({"since": "abc1234", "runs": []}))
    logs = {"unclean_starts": 3, "unclean_start_median_s": 1.5, "unclean_start_max_s": 2.5, "tracebacks": 0,
            "start_failures": 1, "controller_epochs": 9, "controller_epoch_gaps": [4], "error_lines": 7,
            "errors_by_kind": {"x": 7}}
    add(path, run_entry(figures({"kill": 3}, {}), "campaign --seed 7", 0.0))  # a report without them
    for _ in range(2):
        tally = add(path, run_entry({**figures({"kill": 3}, {}), "broker_logs": logs}, "campaign", 0.0))
    assert tally["runs"][1]["broker_logs"] == {
        "unclean_starts": 3, "unclean_start_median_s": 1.5, "unclean_start_max_s": 2.5, "tracebacks": 0,
        "start_failures": 1, "controller_epoch_gaps": [4], "error_lines": 7}
    assert ("the brokers' logs of 2 of them: 6 unclean starts (at most 2.5 s), 0 tracebacks, "
            "2 failed starts, 2 controller epochs missing") in text(tally)


def test_a_report_from_before_the_logs_were_read_has_them_read_when_added(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    path, report = tmp_path / "tally.json", tmp_path / "report"
    path.write_text(json.dumps({"since": "abc1234", "runs": []}))
    report.mkdir()
    (report / "report.json").write_text(json.dumps(figures({"kill": 3}, {})))
    (report / "n1.log").write_text(
        "2026-12-06 23:45:00,000 WARNING storage.log_manager: /d: no clean-shutdown marker; recovering\n"
        "2026-12-06 23:45:01,500 INFO broker.server: broker 1 serving on 10.0.0.2:9092, cluster c1\n")
    monkeypatch.setattr(sys, "argv", ["tally", str(path), "--add", str(report), "--command", "campaign"])
    main()
    assert json.loads(path.read_text())["runs"][0]["broker_logs"]["unclean_start_max_s"] == 1.5
    assert "1 unclean starts (at most 1.5 s)" in capsys.readouterr().out


def test_a_report_from_before_the_logs_were_read_and_without_them_adds_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, report = tmp_path / "tally.json", tmp_path / "report"
    path.write_text(json.dumps({"since": "abc1234", "runs": []}))
    report.mkdir()
    (report / "report.json").write_text(json.dumps(figures({"kill": 3}, {})))
    monkeypatch.setattr(sys, "argv", ["tally", str(path), "--add", str(report), "--command", "campaign"])
    main()
    # not counted as logs that said nothing
    assert "broker_logs" not in json.loads(path.read_text())["runs"][0]
