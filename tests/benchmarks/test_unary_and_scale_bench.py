"""The unary-call and shard-scale benchmarks run end to end on tiny rows and return figures of
the documented shape (their values mean nothing here: no timing is asserted)."""

from __future__ import annotations

import json

import pytest

from benchmarks import scale_bench, unary_bench
from benchmarks.loadtarget import LoadTarget


def test_calls_are_shared_among_callers_and_every_row_makes_a_few_per_caller() -> None:
    assert unary_bench._split(10, 4) == [3, 3, 2, 2]
    assert sum(unary_bench._split(4096, 1024)) == 4096
    for level in unary_bench.CONCURRENCY:
        assert unary_bench.calls_for(level, quick=True) >= 4 * level


def test_a_unary_smoke_run_measures_both_peers_at_each_concurrency() -> None:
    results = unary_bench.run(smoke=True, concurrency=(1, 8))
    rows = results["rows"]
    assert [(row["peer"], row["concurrency"]) for row in rows] == [
        ("kinesis-actors", 1),
        ("boto3", 1),
        ("kinesis-actors", 8),
        ("boto3", 8),
    ]
    for row in rows:
        assert row["calls"] == unary_bench.calls_for(row["concurrency"], False, smoke=True)
        assert row["cpu_us_per_call"] > 0 and row["calls_per_s"] > 0
    json.dumps(results)
    assert "CPU us/call" in unary_bench.report(results)


def test_a_scale_row_reads_every_shard_then_measures_the_idle_window_then_records() -> None:
    row = scale_bench.measure(4, idle=0.5, settle=0.1, records=400, page=32)
    assert row["shards"] == 4
    assert 0 < row["open_s"] <= row["all_read_s"]
    assert 0 < row["open_cpu_s"] <= row["all_read_cpu_s"]
    assert row["idle_s"] >= 0.5
    assert row["idle_cpu_share"] >= 0 and row["idle_reads_per_s"] >= 0
    assert row["rss_before_mb"] > 0 and row["rss_read_mb"] > 0
    assert "rss_open_kib_per_shard" in row and "rss_read_kib_per_shard" in row
    assert row["statistics_cpu_ms"] >= 0 and row["close_s"] > 0 and row["close_cpu_s"] >= 0
    assert row["records"] == 400  # 100 a shard, read by a Consumer of their own
    # In pages of 32, whatever the shard count: 101 records a shard (the first one too) are
    # four calls, the last of 5 records showing the shard's tip.
    assert row["records_page"] == 32 and row["records_calls"] == 4 * 4
    assert row["records_read_cpu_s"] > 0 and row["records_base_cpu_s"] > 0
    assert row["gross_cpu_us_per_record"] > 0 and "cpu_us_per_record" in row
    results = {"rows": [row], "loadavg_start": [0, 0, 0], "loadavg_end": [0, 0, 0], "seconds": 1}
    assert "idle CPU (cores)" in scale_bench.report(results)
    assert "CPU us/record" in scale_bench.report(results)


@pytest.mark.anyio
async def test_records_are_put_on_every_shard_alike_by_its_starting_hash_key() -> None:
    with LoadTarget(shards=3, retain_records=10, tls=False) as target:
        async with target.client() as client:
            assert await scale_bench.put_per_shard(client, target.stream_name, 2, 40) == 3
        shards = target.stats()["shards"]
    assert [shard["records_in"] for shard in shards.values()] == [2, 2, 2]
