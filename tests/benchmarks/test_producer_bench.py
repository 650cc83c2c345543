"""The producer benchmark runs end to end and returns figures of the documented shape.

A smoke run (a few seconds, figures meaningless): no timing is asserted, only structure and
that nothing was lost.
"""

from __future__ import annotations

import json

import pytest

from benchmarks import producer_bench


@pytest.mark.slow
def test_smoke_run_structure() -> None:
    results = producer_bench.run(quick=True, smoke=True)
    assert {"throughput", "capacity", "peers", "loadavg_start", "loadavg_end"} <= set(results)
    names = [row["name"] for row in results["throughput"]]
    assert len(names) == 7 and any(row["backend"] == "trio" for row in results["throughput"])
    for row in results["throughput"]:
        assert row["records_failed"] == 0
        for key in (
            "records_per_s",
            "mb_per_s",
            "client_cpu_us_per_record",
            "target_cpu_us_per_record",
            "target_to_client_cpu",
            "records_per_kinesis_record",
            "records_per_call",
        ):
            assert isinstance(row[key], float) and row[key] >= 0, key
    assert [row["record_bytes"] for row in results["capacity"]] == [1024, 100]
    for row in results["capacity"]:
        assert row["records_failed"] == 0
        assert set(row["series"]) == {"shardId-000000000000", "shardId-000000000001"}
        assert all(len(point) == 4 for rows in row["series"].values() for point in rows)
        assert row["rss_kib_max"] >= row["rss_kib_first"] > 0
        assert {"share_mean", "share_min", "share_max", "share_cv", "throttled"} <= set(row)
    assert len(results["peers"]["rows"]) == 4
    json.dumps(results)  # --json must work
    assert "share of a 2-shard target" in producer_bench.report(results)
