"""The consumer benchmark runs end to end and returns figures of the documented shape.

A smoke run (a few seconds, figures meaningless): no timing is asserted, only structure and
that every latency sample arrived.
"""

from __future__ import annotations

import json

from benchmarks import consumer_bench


def test_smoke_run_structure() -> None:
    results = consumer_bench.run(quick=True, smoke=True)
    assert {"throughput", "latency", "loadavg_start", "loadavg_end", "cpus"} <= set(results)
    names = [row["name"] for row in results["throughput"]]
    assert names == [
        "plain polling default",
        "plain polling unbudgeted",
        "plain efo",
        "agg x10 polling unbudgeted",
        "agg x10 efo",
    ]
    for row in results["throughput"]:
        assert row["records"] >= 3_000
        for key in (
            "records_per_s",
            "mb_per_s",
            "client_cpu_us_per_record",
            "target_cpu_us_per_record",
            "client_cpu_share",
            "target_cpu_share",
            "user_records_per_read",
        ):
            assert isinstance(row[key], float) and row[key] >= 0, key
        assert (row["events_per_s"] is not None) == (row["mode"] == "efo")
        assert len(row["loadavg_before"]) == 3
    latency = results["latency"]
    assert [row["name"] for row in latency["rows"]] == [
        "efo",
        "polling idle 0.05-0.2",
        "polling defaults",
    ]
    for row in latency["rows"]:
        assert row["samples"] == latency["samples"] == 30 and row["missing"] == 0
        assert row["p50_ms"] <= row["p99_ms"] <= row["max_ms"]
    json.dumps(results)  # --json must work
    assert "latency put -> batch delivered" in consumer_bench.report(results)
