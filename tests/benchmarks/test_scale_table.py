"""The side-by-side scale table: one tiny run of its parts end to end, and the table's shape
from figures given (no timing is asserted: the figures of a tiny run mean nothing)."""

from __future__ import annotations

import json

import pytest

from benchmarks import scale_table


@pytest.mark.local_kinesis
def test_a_tiny_run_measures_every_default_part_and_prints_one_table() -> None:
    results = scale_table.run((4,), (1, 2), idle=0.5, records=400, settle=0.1, smoke=True)
    (polling,) = results["polling"]
    assert polling["shards"] == 4 and polling["records"] == 400
    (efo,) = results["efo"]
    assert efo["shards"] == 4 and efo["shards_read"] == 4
    (efo_load,) = results["efo_load"]
    assert efo_load["target"] == "load target" and efo_load["shards_read"] == 4
    assert {(row["peer"], row["concurrency"]) for row in results["unary"]} == {
        (peer, level) for peer in ("kinesis-actors", "boto3") for level in (1, 2)
    }
    assert set(results["loadavg"]) == {"polling", "efo", "efo_load", "unary"}
    assert not results["failed"]
    json.dumps(results)
    table = scale_table.markdown(results)
    lines = [line for line in table.splitlines() if line.startswith("|")]
    assert len({line.count("|") for line in lines}) == 1  # every row as wide as the header
    assert "1,257 → " in table  # the unary call's before at one caller
    assert "EFO from the load target" in table
    assert scale_table._before("unary", 1024) == "4,431"
    assert scale_table._before("polling_idle", 1024) == scale_table._before("polling_idle", 1000)


def test_the_table_sets_each_figure_beside_its_before_and_marks_what_did_not_run() -> None:
    polling = {
        "shards": 1000,
        "open_s": 1.0,
        "all_read_s": 1.1,
        "open_cpu_s": 0.9,
        "all_read_cpu_s": 1.0,
        "idle_cpu_share": 0.04,
        "cpu_us_per_record": 5.0,
        "gross_cpu_us_per_record": 9.0,
        "rss_open_kib_per_shard": 23.0,
        "rss_read_kib_per_shard": 23.5,
        "rss_read_mb": 160.0,
        "statistics_cpu_ms": 7.5,
        "close_s": 0.2,
    }
    efo = {"shards": 1000, "open_s": 2.0, "fds_end": 31, "rss_end_mb": 200.0, "shards_read": 9}
    spark = {
        "shards": 1000,
        "available_now_s": 12.0,
        "worker_cpu_s": 8.0,
        "planner_busy_ms_per_shard": 0.4,
        "idle_runner_share": 0.01,
        "idle_jvm_share": 0.02,
    }
    leases = {"shards": 512, "even_after_s": [10.0, 12.0], "failover_s": [14.0, None]}
    results = {
        "date": "today",
        "machine": {"cores": 2, "cpu_model": "x", "implementation": "CPython", "python": "3"},
        "shards": [512, 1000],
        "callers": [1],
        "loadavg": {"polling": {"start": [1, 1, 1], "end": [2, 2, 2]}},
        "seconds": 1,
        "polling": [polling],
        "efo": [efo],
        "spark": [spark],
        "leases": [leases],
        "unary": [],
        "failed": {"efo": "LimitExceeded('a | b')"},
    }
    table = scale_table.markdown(results)
    assert "| 26.5 / 77 → 1.00 / 1.10 |" in table
    assert "0.96 → 0.040" in table
    assert "| 7.50 / 0.20 |" in table  # statistics() and close: no before
    assert "3.9 s / 1,037 / 251 → 2.0 s / 31 / 200 (at the end)" in table
    assert "9 read in" in table  # not every EFO shard read in the time given
    assert "170 → 12.0" in table and "3.9-4.1 → 0.400" in table and "68-72 → 3" in table
    assert "34 / 103 → 10 / 12" in table and "27 / 16 → 14 / not done" in table
    assert "14.5 / 30 → not run" in table  # 512 shards: no polling row given
    assert "1,257 → not run" in table
    assert "| efo: failed | LimitExceeded('a / b') |" in table
