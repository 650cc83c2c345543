"""The consumer CPU benchmark runs a row end to end on a few records and returns figures of the
documented shape (their values mean nothing here: no timing is asserted)."""

from __future__ import annotations

import json

import pytest

from benchmarks import consumer_cpu


def test_a_row_reads_every_record_three_times_and_splits_its_cost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(consumer_cpu.ROWS, "shards-3", 3)
    row = consumer_cpu.measure("shards-3", records=600)
    assert row["row"] == "shards-3" and row["shards"] == 3 and row["records"] == 600
    for read in ("first", "base", "full"):
        assert row[f"{read}_read_cpu_s"] > 0
    assert {"cpu_us_per_record", "sys_us_per_record", "gc_us_per_record", "shard_ms"} <= set(row)
    json.dumps(row)


def test_the_per_shard_part_is_what_the_base_read_costs_beyond_its_records() -> None:
    # 1,000 records more cost 2 ms more: 2 us a record; the base read's other 3 ms are its
    # 3 shards'.
    split = consumer_cpu._per_shard(shards=3, added=1_000, base=0.005, full=0.007)
    assert split["cpu_us_per_record"] == pytest.approx(2.0)
    assert split["shard_ms"] == pytest.approx(1.0)


def test_the_report_gives_each_row_and_its_ratio_round_by_round() -> None:
    def run(us: float) -> dict[str, float]:
        figures = ("sys_us_per_record", "gc_us_per_record", "shard_ms")
        return {"cpu_us_per_record": us} | dict.fromkeys(figures, 0.0)

    runs = {"a": [run(2.0), run(4.0)], "b": [run(3.0), run(4.0)]}
    text = consumer_cpu.report({"loadavg_start": [0.0], "loadavg_end": [0.0], "runs": runs})
    assert "a: 3.00 (2.00-4.00)" in text
    assert "b: 1.25x (1.00-1.50)" in text
