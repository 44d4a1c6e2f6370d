"""The tally of long chaos runs: a run's report figures added, the totals per nemesis."""

from __future__ import annotations

import json
from pathlib import Path

from tests.chaos.tally import add, run_entry, text, totals


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
