"""``benchmarks/efo_scale_bench.py``: a tiny row against the load target (the 1,000-shard rows
are run by hand)."""

from __future__ import annotations

from benchmarks import efo_scale_bench


def test_a_load_target_row_subscribes_and_reads_every_shard_on_one_connection() -> None:
    row = efo_scale_bench.run((4,), load_target=True)[0]
    assert row["shards"] == 4 and row["target"] == "load target"
    assert row["shards_read"] == row["shards_subscribed"] == 4
    assert 0 <= row["open_s"] <= row["all_read_s"]  # rounded to 10 ms
    assert row["connections"] == 1  # four subscriptions share one
    assert row["fds_end"] >= row["fds_before"] and row["target_cpu_s"] >= 0
