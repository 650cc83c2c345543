"""The producer CPU benchmark runs its rows end to end on a few records and returns figures of
the documented shape (their values mean nothing here: no timing is asserted)."""

from __future__ import annotations

import json

from benchmarks import producer_cpu


def test_an_unpaced_row_and_a_new_key_row_measure_every_record() -> None:
    for name in ("unpaced-2", "newkey"):
        row = producer_cpu.measure(name, count=2_000)
        assert row["row"] == name and row["records"] == 2_000
        assert row["records_failed"] == 0 and row["calls"] >= 1
        assert row["client_cpu_us_per_record"] > 0
        json.dumps(row)


def test_a_capacity_row_reports_the_targets_share() -> None:
    row = producer_cpu.measure("capacity", count=30_000)
    assert row["records_failed"] == 0
    assert {"share_mean", "share_min", "steady_seconds", "backpressure_cycles"} <= set(row)


def test_the_report_has_a_line_per_row() -> None:
    run = {"row": "unpaced-2", "client_cpu_us_per_record": 2.0, "calls": 3}
    results = {"loadavg_start": [0.0], "loadavg_end": [0.0], "runs": {"unpaced-2": [run]}}
    assert "unpaced-2: 2.00 (2.00-2.00)" in producer_cpu.report(results)


def test_a_bursts_row_sleeps_between_its_bursts_and_loses_nothing() -> None:
    """Records in two bursts, each followed by 0.2 s of sleep: every record sent."""
    row = producer_cpu.measure("unpaced-2-bursts", count=2 * producer_cpu.BURST)
    assert row["records_failed"] == 0 and row["records"] == 2 * producer_cpu.BURST
    assert row["calls"] >= 2
    assert row["seconds"] >= producer_cpu.BURST_IDLE * 2
