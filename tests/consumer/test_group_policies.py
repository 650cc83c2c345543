"""The consumer's lease-table options and its sans-IO side of a lease table, without a loop."""

from __future__ import annotations

import dataclasses
import os
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kinesis_actors import errors
from kinesis_actors.consumer import ConsumerConfig, ConsumerStatistics, StartingPosition
from kinesis_actors.consumer._group import (
    LeaseAssignment,
    default_worker_id,
    lease_event,
    saved_from_lease,
)
from kinesis_actors.consumer._scheduler import _HANDOVER_TIMEOUT
from kinesis_actors.consumer._shards import ShardGraph, ShardInfo
from kinesis_actors.leases import LeaseConfig, LeaseStats
from kinesis_actors.leases._config import MIN_FAILOVER_TIME
from kinesis_actors.leases._coordinator import round_wait
from kinesis_actors.metrics import INSTRUMENTS
from kinesis_actors.metrics._catalog import consumer_points
from kinesis_actors.records import Position

SPLIT = [
    ShardInfo("s", "shardId-0", closed=True),
    ShardInfo("s", "shardId-1", ("shardId-0",)),
    ShardInfo("s", "shardId-2", ("shardId-0",)),
]


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"lease_table": "ab"}, "lease_table"),
        ({"lease_table": "no spaces"}, "lease_table"),
        ({"lease_table": 7}, "lease_table"),
        ({"lease_table": "app", "worker_id": ""}, "worker_id"),
        ({"lease_table": "app", "worker_id": "   "}, "worker_id"),
        ({"lease_table": "app", "worker_id": "w" * 257}, "worker_id"),
        (
            {"lease_table": "app", "dynamodb_endpoint_url": "localhost:8000"},
            "dynamodb_endpoint_url",
        ),
        ({"lease_table": "app", "leases": {"failover_time": 2}}, "leases"),
        ({"lease_table": "app", "worker_count": 2, "worker_index": 1}, "worker_count"),
        ({"lease_table": "app", "positions": {"version": 1, "streams": {}}}, "positions"),
        ({"worker_id": "w1"}, "lease_table"),
        ({"dynamodb_endpoint_url": "http://127.0.0.1:8000"}, "lease_table"),
        ({"leases": LeaseConfig()}, "lease_table"),
    ],
)
def test_bad_lease_options_are_config_errors_naming_the_option(
    options: dict[str, Any], named: str
) -> None:
    with pytest.raises(errors.ConfigError, match=named):
        ConsumerConfig(**options)


def test_good_lease_options_are_kept_as_given() -> None:
    config = ConsumerConfig(
        lease_table="orders-app.v2",
        worker_id="host-a",
        dynamodb_endpoint_url="https://dynamodb.eu-west-1.amazonaws.com",
        leases=LeaseConfig(failover_time=3.0),
    )
    assert config.lease_table == "orders-app.v2"
    assert config.worker_id == "host-a"
    assert config.leases is not None and config.leases.failover_time == 3.0


def test_a_default_worker_id_names_the_host_and_process_and_differs_per_call() -> None:
    first, second = default_worker_id(), default_worker_id()
    assert first != second
    assert f":{os.getpid()}:" in first


def test_a_sequence_checkpoint_resumes_after_that_user_record_mid_aggregate_included() -> None:
    saved = saved_from_lease("49590338271490256608559692538361571095921575989136588898", 3, ())
    assert saved.committed == Position(
        "49590338271490256608559692538361571095921575989136588898", 3
    )
    assert saved.start is None and not saved.finished


def test_special_checkpoints_start_where_the_kcl_means_and_children_from_the_trim_horizon() -> None:
    assert saved_from_lease("TRIM_HORIZON", 0, ()).start == StartingPosition.trim_horizon()
    # A root never read: the consumer's own start applies (no start in the saved state).
    assert saved_from_lease("LATEST", 0, ()).start is None
    assert saved_from_lease("AT_TIMESTAMP", 0, ()).start is None
    # A child: everything in it is after its parents, whatever the initial position said.
    assert saved_from_lease("LATEST", 0, ("shardId-0",)).start == StartingPosition.trim_horizon()
    assert saved_from_lease("SHARD_END", 0, ()).finished


def test_a_pinned_latest_root_resumes_at_its_pin_and_a_pin_ahead_of_our_clock_at_now() -> None:
    now = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
    pin = int((now - timedelta(seconds=30)).timestamp() * 1000)
    saved = saved_from_lease("LATEST", 0, (), pin, now=now)
    assert saved.start == StartingPosition.at_timestamp(now - timedelta(seconds=30))
    ahead = int((now + timedelta(seconds=30)).timestamp() * 1000)
    assert saved_from_lease("LATEST", 0, (), ahead, now=now).start == (
        StartingPosition.at_timestamp(now)
    )
    # A checkpoint, or a child, wins over the pin.
    assert saved_from_lease("42", 0, (), pin, now=now).committed is not None
    child = saved_from_lease("LATEST", 0, ("shardId-0",), pin, now=now)
    assert child.start == StartingPosition.trim_horizon()


def test_with_leases_the_graph_reads_exactly_the_held_shards_and_leaves_the_gate_to_the_table() -> (
    None
):
    held = LeaseAssignment()
    graph = ShardGraph(assignment=held)
    graph.update("s", SPLIT)
    assert graph.shards() == []
    held.add(("s", "shardId-1"))
    assert [shard.shard_id for shard in graph.shards()] == ["shardId-1"]
    # The coordinator hands a child over once its parent's lease reached SHARD_END.
    assert graph.ready(SPLIT[1], lambda key: False)
    held.discard(("s", "shardId-1"))
    assert graph.shards() == []
    assert list(held) == [] and len(held) == 0


def test_the_static_assignment_still_gates_a_child_on_its_own_parent() -> None:
    graph = ShardGraph()
    graph.update("s", SPLIT)
    assert not graph.ready(SPLIT[1], lambda key: False)
    assert graph.ready(SPLIT[1], lambda key: True)


def test_a_lease_event_is_one_machine_readable_attribute_of_a_log_record() -> None:
    extra = lease_event("stop", ("s", "shardId-3"), reason="taken")
    assert extra == {
        "lease_event": {"ev": "stop", "stream": "s", "shard": "shardId-3", "reason": "taken"}
    }


def test_every_lease_statistic_is_exported_and_latency_only_once_measured() -> None:
    names = [f.name for f in dataclasses.fields(LeaseStats) if f.name != "worker_id"]
    stats = LeaseStats("w", *range(1, len(names) + 1))
    snapshot = ConsumerStatistics(leases=stats)
    points = {p.name: p.value for p in consumer_points(snapshot, {}) if ".leases." in p.name}
    assert sorted(points.values()) == list(range(1, len(names) + 1))
    documented = {spec.name for spec in INSTRUMENTS}
    assert set(points) <= documented
    snapshot = ConsumerStatistics(leases=LeaseStats("w"))  # no renewal yet
    names_now = {p.name for p in consumer_points(snapshot, {})}
    assert "kinesis_actors.consumer.leases.held" in names_now
    assert not any("latency" in name for name in names_now)


@pytest.mark.parametrize("failover", [MIN_FAILOVER_TIME, 10.0, 20.0, 60.0, 600.0])
def test_release_alls_wait_for_a_take_round_fits_the_close_budget_at_any_failover_time(
    failover: float,
) -> None:
    """A clean close gives the leases' hand-over ``_HANDOVER_TIMEOUT`` in all: the releases
    themselves, then the wait for a take round under way. A wait of half a failover time
    alone outlasted it past a 20 s failover time, and the close cut the wait short."""
    wait = round_wait(LeaseConfig(failover_time=failover))
    assert 0 < wait <= _HANDOVER_TIMEOUT / 2
    assert wait <= failover / 2
