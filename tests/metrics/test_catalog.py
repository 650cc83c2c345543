"""The instrument table and the snapshot-to-points functions, without OpenTelemetry or a loop."""

from __future__ import annotations

import dataclasses
import re

from kinesis_actors.client import ClientStats
from kinesis_actors.consumer import ConsumerStatistics, ShardStatistics
from kinesis_actors.leases import LeaseStats
from kinesis_actors.metrics import INSTRUMENTS
from kinesis_actors.metrics._catalog import client_points, consumer_points, producer_points
from kinesis_actors.producer import ProducerMetrics

NAME = re.compile(r"^kinesis_actors\.(producer|consumer|client)(\.[a-z][a-z0-9_]*)+$")
UNIT = re.compile(r"^(s|By|\{[a-z_]+\})$")


def test_names_are_dotted_lowercase_under_the_package_prefix_with_a_unit() -> None:
    for spec in INSTRUMENTS:
        assert NAME.match(spec.name), spec.name
        assert UNIT.match(spec.unit), (spec.name, spec.unit)
        assert spec.description.endswith("."), spec.name
        assert spec.kind in ("counter", "up_down_counter", "gauge")


def test_no_two_instruments_share_a_name_and_no_name_is_another_ones_namespace() -> None:
    names = [spec.name for spec in INSTRUMENTS]
    assert len(set(names)) == len(names)
    for name in names:
        assert not any(other.startswith(name + ".") for other in names), name


def test_every_field_of_every_snapshot_has_an_instrument() -> None:
    # A new counter in a snapshot fails here until it is exported too.
    # Its counters, that is: the supervision tree at the end is plain data, not a figure.
    counters = [f for f in dataclasses.fields(ProducerMetrics) if f.name != "supervision"]
    producer = ProducerMetrics(*range(1, len(counters) + 1))
    values = {point.value for point in producer_points(producer, {"stream": "s"})}
    assert values == set(range(1, len(counters) + 1))

    stats = ClientStats(*range(1, len(dataclasses.fields(ClientStats)) + 1))
    values = {point.value for point in client_points(stats, {})}
    assert values == set(range(1, len(dataclasses.fields(ClientStats)) + 1))

    numeric = [
        f.name
        for f in dataclasses.fields(ShardStatistics)
        if f.name not in ("state", "millis_behind_latest", "resubscriptions")
    ]
    shard = ShardStatistics(**{name: 1000 + i for i, name in enumerate(numeric)})
    snapshot = _consumer_snapshot({("s", "shardId-0"): shard})
    values = {point.value for point in consumer_points(snapshot, {})}
    assert {1000 + i for i in range(len(numeric))} <= values


def test_each_point_names_a_documented_instrument_with_its_attributes() -> None:
    documented = {spec.name: set(spec.attributes) for spec in INSTRUMENTS}
    shard = ShardStatistics(
        state="reading", millis_behind_latest=1500, resubscriptions={"renewal": 2}
    )
    points = [
        *producer_points(ProducerMetrics(*[0] * 18), {"stream": "s"}),
        *client_points(ClientStats(), {"cloud.region": "eu-west-1"}),
        *consumer_points(_consumer_snapshot({("s", "shardId-0"): shard}), {}),
        *consumer_points(dataclasses.replace(_consumer_snapshot({}), leases=_lease_stats()), {}),
    ]
    assert {point.name for point in points} == set(documented)
    for point in points:
        assert set(point.attributes) == documented[point.name], point.name


def test_lag_is_reported_in_seconds_and_only_once_a_shard_was_read() -> None:
    read = ShardStatistics(millis_behind_latest=2500)
    unread = ShardStatistics()
    snapshot = _consumer_snapshot({("orders", "shardId-1"): read, ("orders", "shardId-2"): unread})
    lag = [p for p in consumer_points(snapshot, {}) if p.name == "kinesis_actors.consumer.lag"]
    assert [(p.value, p.attributes["shard"]) for p in lag] == [(2.5, "shardId-1")]


def test_a_shard_counts_once_in_its_state_and_resubscriptions_by_cause() -> None:
    shard = ShardStatistics(state="starved", resubscriptions={"renewal": 3, "error": 1})
    points = list(
        consumer_points(_consumer_snapshot({("orders", "shardId-7"): shard}), {"app": "a"})
    )
    states = [p for p in points if p.name == "kinesis_actors.consumer.shards"]
    assert [(p.value, dict(p.attributes)) for p in states] == [
        (1, {"app": "a", "stream": "orders", "shard": "shardId-7", "state": "starved"})
    ]
    causes = {
        p.attributes["cause"]: p.value
        for p in points
        if p.name == "kinesis_actors.consumer.resubscriptions"
    }
    assert causes == {"renewal": 3, "error": 1}


def test_waiting_shards_are_counted_per_stream_and_a_stream_without_any_says_zero() -> None:
    snapshot = _consumer_snapshot(
        {("a", "shardId-0"): ShardStatistics()},
        waiting=[("b", "shardId-3"), ("b", "shardId-4")],
    )
    waiting = {
        p.attributes["stream"]: p.value
        for p in consumer_points(snapshot, {})
        if p.name == "kinesis_actors.consumer.waiting_shards"
    }
    assert waiting == {"a": 0, "b": 2}


def _lease_stats() -> LeaseStats:
    """``Consumer.statistics().leases`` of a worker with a lease table, after a renewal."""
    return LeaseStats("w", renewal_latency_last=0.01, renewal_latency_max=0.02)


def _consumer_snapshot(
    shards: dict[tuple[str, str], ShardStatistics], waiting: list[tuple[str, str]] | None = None
) -> ConsumerStatistics:
    """What ``Consumer.statistics()`` returns."""
    return ConsumerStatistics(
        shards=shards,
        waiting_shards=tuple(waiting or ()),
        discoveries=4,
        list_shards_calls=5,
        discovery_failures=0,
        buffered_batches=0,
    )
