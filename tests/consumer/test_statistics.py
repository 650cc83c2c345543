"""``Consumer.statistics()``: a frozen snapshot keyed by ``(stream, shard_id)``, copied from
the shards' live counters; ``Consumer.metrics`` kept for one release with a warning."""

from __future__ import annotations

import dataclasses
import json

import pytest

from kinesis_actors.client import KinesisClient
from kinesis_actors.consumer import (
    Consumer,
    ConsumerStatistics,
    ShardState,
    ShardStatistics,
    StartingPosition,
)
from kinesis_actors.consumer._metrics import ShardMetrics
from kinesis_actors.consumer._pipeline import ShardPipeline
from kinesis_actors.consumer._positions import SavedShard
from kinesis_actors.consumer._statistics import legacy_metrics
from kinesis_actors.leases import LeaseStats

ENDPOINT = "http://127.0.0.1:9"  # never called: the consumers here are not opened


def test_a_shards_statistics_have_every_counter_of_its_live_metrics() -> None:
    live = [field.name for field in dataclasses.fields(ShardMetrics)]
    assert [field.name for field in dataclasses.fields(ShardStatistics)] == live


def test_a_shards_statistics_are_a_copy_that_its_reader_no_longer_changes() -> None:
    pipeline = ShardPipeline(("s", "shardId-0"), SavedShard(start=StartingPosition.latest()), 2)
    counters = pipeline.counters
    counters.reads = 3
    counters.resubscriptions["renewal"] = 1
    statistics = pipeline.statistics()
    counters.reads = 4
    counters.resubscriptions["renewal"] = 2
    assert (statistics.reads, statistics.resubscriptions) == (3, {"renewal": 1})
    assert statistics.buffer_depth == 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        statistics.reads = 5  # type: ignore[misc]


def test_a_snapshot_and_its_dict_hold_what_a_deep_copy_would() -> None:
    pipeline = ShardPipeline(("s", "shardId-0"), SavedShard(start=StartingPosition.latest()), 2)
    counters = pipeline.counters
    for number, counter in enumerate(dataclasses.fields(ShardMetrics), start=1):
        filled_in = counter.name in ("buffer_depth", "backpressured_seconds")  # by the snapshot
        if counter.type in ("int", "float", "int | None") and not filled_in:
            setattr(counters, counter.name, number)
    counters.resubscriptions.update(renewal=2, error=1)
    statistics = pipeline.statistics()
    expected = dataclasses.asdict(counters) | {"buffer_depth": 0, "backpressured_seconds": 0.0}
    as_dict = statistics.to_dict()
    assert as_dict == expected and dataclasses.asdict(statistics) == expected
    as_dict["resubscriptions"]["renewal"] = 9  # neither the snapshot nor the live counters
    assert statistics.resubscriptions == counters.resubscriptions == {"renewal": 2, "error": 1}


def test_a_shards_state_is_an_enum_equal_to_its_name_in_snapshots_and_json() -> None:
    pipeline = ShardPipeline(("s", "shardId-0"), SavedShard(start=StartingPosition.latest()), 2)
    assert pipeline.statistics().state is ShardState.WAITING
    pipeline.drop()  # its lease went to another worker
    statistics = pipeline.statistics()
    assert statistics.state is ShardState.LOST and statistics.state == "lost"
    assert json.loads(json.dumps(statistics.to_dict()))["state"] == "lost"
    finished = ShardPipeline(("s", "shardId-1"), SavedShard(finished=True), 2)
    assert finished.statistics().state is ShardState.FINISHED


def test_statistics_before_open_are_empty_and_frozen() -> None:
    consumer = Consumer(KinesisClient(endpoint_url=ENDPOINT), "orders")
    statistics = consumer.statistics()
    assert statistics == ConsumerStatistics()
    assert statistics.supervision == consumer.supervision == ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        statistics.discoveries = 1  # type: ignore[misc]


def test_consumer_metrics_still_works_and_warns_naming_statistics() -> None:
    consumer = Consumer(KinesisClient(endpoint_url=ENDPOINT), "orders")
    with pytest.warns(DeprecationWarning, match=r"Consumer\.statistics\(\)"):
        metrics = consumer.metrics
    assert metrics == legacy_metrics(consumer.statistics())


def test_the_deprecated_dict_has_the_old_shape_with_string_keys() -> None:
    shard = ShardStatistics(state="reading", reads=2, resubscriptions={"renewal": 1})
    statistics = ConsumerStatistics(
        shards={("orders", "shardId-1"): shard},
        waiting_shards=(("orders", "shardId-2"),),
        discoveries=3,
        list_shards_calls=4,
        buffered_batches=0,
        leases=LeaseStats("w"),
    )
    metrics = legacy_metrics(statistics)
    assert metrics["shards"] == {"orders/shardId-1": dataclasses.asdict(shard)}
    assert metrics["waiting_shards"] == ["orders/shardId-2"]
    assert metrics["leases"] == dataclasses.asdict(LeaseStats("w"))
    assert (metrics["discoveries"], metrics["list_shards_calls"]) == (3, 4)
    assert "supervision" not in metrics


def test_waiting_shards_are_counted_per_stream_with_zero_for_a_stream_without_any() -> None:
    statistics = ConsumerStatistics(
        shards={("a", "shardId-0"): ShardStatistics()},
        waiting_shards=(("b", "shardId-3"), ("b", "shardId-4")),
    )
    assert statistics.waiting_by_stream() == {"a": 0, "b": 2}
