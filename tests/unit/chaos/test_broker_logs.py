"""The report's reading of the brokers' logs, on hand-made logs in the brokers' own format."""

from __future__ import annotations

from pathlib import Path

from tests.chaos.brokerlogs import read_dir, read_logs, text

N1 = """\

===== harness: start #1 =====
2026-12-06 23:44:11,071 INFO broker.cluster.membership: broker 1 registered in cluster c1
2026-12-06 23:44:11,090 INFO broker.server: broker 1 serving on 10.0.0.2:9092, cluster c1
2026-12-06 23:44:11,133 INFO broker.cluster.controller: broker 1 is now the controller (epoch 1)
2026-12-06 23:55:23,410 ERROR broker.replication.write_failures: partition txn-1: cannot write (ENOSPC)
2026-12-06 23:55:23,483 ERROR broker.replication.write_failures: partition ctp-12: cannot write (ENOSPC)

===== harness: start #2 =====
2026-12-06 23:56:14,340 WARNING storage.log_manager: /tmp/n1/data: no clean-shutdown marker; recovering
gregor: cannot start: /tmp/n1/data/txn-1: cannot load the log: No space left on device

===== harness: start #3 =====
2026-12-06 23:57:00,000 WARNING storage.log_manager: /tmp/n1/data: no clean-shutdown marker; recovering
2026-12-06 23:57:02,500 INFO broker.server: broker 1 serving on 10.0.0.2:9092, cluster c1
2026-12-06 23:57:03,000 INFO broker.cluster.controller: broker 1 is now the controller (epoch 4)
"""

N2 = """\
2026-12-06 23:45:00,000 WARNING storage.log_manager: /tmp/n2/data: no clean-shutdown marker; recovering
2026-12-06 23:45:01,000 INFO broker.server: broker 2 serving on 10.0.0.3:9092, cluster c1
2026-12-06 23:46:01,570 INFO broker.cluster.controller: broker 2 is now the controller (epoch 2)
2026-12-06 23:46:02,000 ERROR broker.front.connection: unexpected error
Traceback (most recent call last):
  File "x.py", line 1, in <module>
ValueError: boom
"""


def test_the_facts_of_the_brokers_logs() -> None:
    facts = read_logs([N1, N2])
    # n1's failed start has no "serving on" of its own: its next unclean start (2.5 s) counts
    assert facts.unclean_starts_s == (2.5, 1.0)
    assert (facts.tracebacks, facts.start_failures) == (1, 1)
    assert facts.epoch_gaps() == [3]
    full = "broker.replication.write_failures: partition P: cannot write (ENOSPC)"
    assert facts.errors_by_kind == {full: 2, "broker.front.connection: unexpected error": 1}
    figures = facts.figures()
    starts = (figures["unclean_starts"], figures["unclean_start_median_s"], figures["unclean_start_max_s"])
    assert starts == (2, 1.8, 2.5)
    lines = text(figures)
    assert lines[0] == ("broker logs: 2 unclean starts (1.8 s median, 2.5 s at most); tracebacks 1; "
                        "failed starts 1; controller epochs 3 (missing [3]); ERROR lines 3")
    assert lines[1] == "       2 broker.replication.write_failures: partition P: cannot write (ENOSPC)"


def test_a_run_without_logs_says_so(tmp_path: Path) -> None:
    facts = read_dir(tmp_path)
    assert facts.figures()["unclean_start_median_s"] is None
    assert text(facts.figures()) == ["broker logs: no unclean start; tracebacks 0; failed starts 0; "
                                     "controller epochs 0 (none missing); ERROR lines 0"]


def test_the_logs_are_read_from_the_report_dir(tmp_path: Path) -> None:
    (tmp_path / "n1.log").write_text(N1)
    (tmp_path / "n2.log").write_text(N2)
    (tmp_path / "clients.log").write_text("Traceback (most recent call last):\n")  # not a broker's
    assert read_dir(tmp_path) == read_logs([N1, N2])
