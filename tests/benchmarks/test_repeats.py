"""Repeated throughput rows: interleaved runs, the median run reported, failures not hidden."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pytest

from benchmarks import report, scenarios


@dataclass(frozen=True)
class Peer:
    name: str


def ok(rate: float, cpu: float = 1.0) -> dict[str, Any]:
    return {"status": "ok", "records_per_s": rate, "client_cpu_us_per_record": cpu}


def test_the_median_run_is_reported_with_every_rate() -> None:
    row = scenarios.median_row([ok(300, cpu=3), ok(100, cpu=1), ok(200, cpu=2)])
    assert row["records_per_s"] == 200
    assert row["client_cpu_us_per_record"] == 2  # the figures of one and the same run
    assert row["runs_records_per_s"] == [300, 100, 200]


def test_a_failed_run_is_reported_instead_of_the_lucky_ones() -> None:
    failed = {"status": "failed", "reason": "boom"}
    assert scenarios.median_row([ok(300), failed, ok(100)]) is failed


def test_peers_are_interleaved_and_each_gets_its_median() -> None:
    order: list[str] = []
    rates = {"a": iter([10, 30, 20]), "b": iter([5, 6, 7])}

    def run(peer: Peer) -> dict[str, Any]:
        order.append(peer.name)
        return ok(next(rates[peer.name]))

    scale = replace(scenarios.SCALES["smoke"], repeats=3)
    rows = scenarios._repeated(scale, [Peer("a"), Peer("b")], run, lambda _: None, "x")
    assert order == ["a", "b", "a", "b", "a", "b"]
    assert [row["records_per_s"] for row in rows] == [20, 6]


def test_the_table_notes_the_range_of_repeated_rows() -> None:
    row = {"config": "100 B", "peer": "p", "target_cpu_us_per_record": 1.0}
    row |= {"target_below_client_cpu": True, "runs_records_per_s": [1000.0, 3000.0, 2000.0]}
    row |= ok(2000.0)
    lines = report._throughput([row])
    assert lines[-1].endswith("| median of 3: 1,000-3,000 rec/s |")
    single = report._throughput([row | {"runs_records_per_s": [2000.0]}])
    assert single[-1].endswith("| yes |  |")


def test_the_published_mode_repeats() -> None:
    assert scenarios.SCALES["full"].repeats >= 3


def test_a_peer_row_that_moved_no_record_is_failed_and_the_project_raises() -> None:
    """Seen once in CI: async-kinesis's consumer read nothing in a smoke row, which was then
    reported as "ok" with the whole run's CPU as its cost per record."""
    target: Any = object()  # never touched: the runner starts no clock

    def nothing(target: Any, spec: Any, clock: Any) -> dict[str, Any]:
        return {"records": 0}

    row = scenarios.run_row("a peer", nothing, target, None, 100)
    assert row["status"] == "failed" and row["reason"].startswith("moved no record in ")
    with pytest.raises(RuntimeError, match="moved no record"):
        scenarios.run_row(scenarios.PROJECT, nothing, target, None, 100)
