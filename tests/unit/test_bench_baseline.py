"""make bench's verdict (bench/baseline.py, bench/reference.py's Comparison): Gregor's rows are
judged on the ratio to Kafka of the same run and on broker CPU per operation; the absolute
figure only where no Kafka ran; a reference broker's failure is its row's answer, Gregor's fails
the benchmark."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import baseline
from bench.baseline import Measured, Verdict
from bench.reference import GREGOR, KAFKA, TANSU, Comparison


def test_a_row_beside_kafka_is_judged_on_the_ratio_not_the_figure() -> None:
    base = Verdict(Measured(figure=500.0, vs_kafka=4.0, cpu_ms=1.4))
    assert not base.regressed(Measured(figure=100.0, vs_kafka=3.5, cpu_ms=1.4))  # a slower machine
    assert base.regressed(Measured(figure=900.0, vs_kafka=2.9, cpu_ms=1.4))  # Kafka pulled ahead
    assert "REGRESSION" in base.text(Measured(figure=900.0, vs_kafka=2.9))


def test_cpu_per_operation_must_not_grow() -> None:
    base = Verdict(Measured(vs_kafka=4.0, cpu_ms=1.0))
    assert not base.regressed(Measured(vs_kafka=4.0, cpu_ms=1.2))
    assert base.regressed(Measured(vs_kafka=4.0, cpu_ms=1.3))


def test_the_figure_is_judged_only_without_kafka() -> None:
    legacy = Verdict(Measured.of(500.0))  # a bare number: the baseline before ratios
    assert legacy.regressed(Measured(figure=300.0))
    assert not legacy.regressed(Measured(figure=300.0, vs_kafka=2.0))
    assert legacy.text(Measured(figure=300.0, vs_kafka=2.0)) == "no baseline ratio"


def test_update_writes_what_load_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(baseline, "BASELINE", tmp_path / "baseline.json")
    (tmp_path / "baseline.json").write_text(json.dumps({"other": {"row": 1.0}, "b": {"old": 2.0}}))
    baseline.update("b", {"row": Measured(figure=450.04, vs_kafka=9.2345, cpu_ms=1.3812)})
    assert baseline.load("b") == {"row": Measured(figure=450.0, vs_kafka=9.235, cpu_ms=1.381)}
    assert baseline.load("other") == {"row": Measured(figure=1.0)}


def comparison(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Comparison:
    monkeypatch.setattr(baseline, "BASELINE", tmp_path / "baseline.json")
    c = Comparison("b")
    c.record(GREGOR, "txn of 10", 400.0, "txn/s", cpu_ms=1.4, per="txn")
    c.record(KAFKA, "txn of 10", 50.0, "txn/s", cpu_ms=2.0, per="txn")
    with c.attempt(TANSU, "txn of 10"):
        raise RuntimeError("UNSUPPORTED_VERSION")
    return c


def test_a_reference_broker_failing_is_printed_in_its_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    c = comparison(tmp_path, monkeypatch)
    assert c.ratio("txn of 10") == 8.0 and c.ratio("txn of 10", TANSU) is None
    c.finish(update_baseline=False)
    out = capsys.readouterr().out
    assert "failed" in out and "UNSUPPORTED_VERSION" in out and "keeps its data in memory" in out
    assert "1.40 / 2.00 / - ms/txn" in out


def test_gregor_failing_fails_the_benchmark(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c = comparison(tmp_path, monkeypatch)
    with c.attempt(GREGOR, "txn of 1000"):
        raise RuntimeError("boom")
    with pytest.raises(SystemExit, match="FAILED on Gregor in 1 rows: txn of 1000"):
        c.finish(update_baseline=False)


def test_update_baseline_records_ratio_and_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c = comparison(tmp_path, monkeypatch)
    c.finish(update_baseline=True)
    assert baseline.load("b") == {"txn of 10": Measured(figure=400.0, vs_kafka=8.0, cpu_ms=1.4)}
    c.record(GREGOR, "txn of 10", 400.0, "txn/s", cpu_ms=1.9, per="txn")  # CPU up 36%
    with pytest.raises(SystemExit, match="REGRESSION in 1 rows"):
        c.finish(update_baseline=False)
