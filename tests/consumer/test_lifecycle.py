"""The consumer's lifecycle lines, sans-IO: what it says when it opens, where each shard
starts and why, and what it read when it closes."""

from __future__ import annotations

from datetime import UTC, datetime

from kinesis_actors import StartingPosition
from kinesis_actors.consumer._lifecycle import closed_line, opened_line, start_line
from kinesis_actors.consumer._positions import SavedShard
from kinesis_actors.records import Position

KEY = ("orders", "shardId-000000000001")


def _start(saved: SavedShard | None, start: StartingPosition, **facts: object) -> str:
    given: dict[str, object] = {
        "configured": "TRIM_HORIZON",
        "from_lease": False,
        "known_at_open": True,
        "resumed": False,
    }
    given.update(facts)
    return start_line(KEY, saved, start, **given)  # type: ignore[arg-type]


def test_the_opened_line_names_each_stream_with_its_shard_count_and_the_mode() -> None:
    line = opened_line({"orders": 4, "audit": 1}, "efo", lease_table=None, worker_id=None)
    assert line == (
        "consumer opened: orders (4 shards), audit (1 shard); mode efo; "
        "every shard read by this worker"
    )
    grouped = opened_line({"orders": 2}, "polling", lease_table="app", worker_id="w-1")
    assert "lease table 'app' as worker 'w-1'" in grouped


def test_a_shard_at_the_initial_position_says_so() -> None:
    line = _start(None, StartingPosition.latest(), configured="LATEST")
    assert line == "orders/shardId-000000000001: starts at LATEST, the initial position"
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    at = _start(None, StartingPosition.at_timestamp(when), configured="AT_TIMESTAMP")
    assert "starts at AT_TIMESTAMP 2026-01-02T03:04:05+00:00, the initial position" in at


def test_a_child_shard_under_latest_says_it_is_pinned_to_the_open() -> None:
    when = datetime(2026, 1, 2, tzinfo=UTC)
    line = _start(None, StartingPosition.at_timestamp(when), configured="LATEST")
    assert "the initial position LATEST, pinned to the open" in line


def test_a_checkpoint_names_its_sequence_number_and_where_it_came_from() -> None:
    saved = SavedShard(committed=Position("4959", 2))
    assert _start(saved, StartingPosition.trim_horizon()).endswith(
        "starts after sequence number 4959 (sub 2), from the positions given"
    )
    assert _start(saved, StartingPosition.trim_horizon(), from_lease=True).endswith(
        "from the lease's checkpoint"
    )


def test_a_shard_new_since_the_open_or_the_save_starts_at_trim_horizon_and_says_why() -> None:
    trim = StartingPosition.trim_horizon()
    assert "appeared since the consumer opened" in _start(None, trim, known_at_open=False)
    assert "not in the positions given" in _start(None, trim, resumed=True)


def test_the_closed_line_counts_records_batches_and_shards() -> None:
    shards = [{"user_records": 1200, "batches": 10}, {"user_records": 3, "batches": 1}]
    assert closed_line(shards, clean=True) == (
        "consumer closed: 1,203 records in 11 batches from 2 shards"
    )
    assert closed_line([], clean=False) == (
        "consumer closed (on an error): 0 records in 0 batches from 0 shards"
    )
