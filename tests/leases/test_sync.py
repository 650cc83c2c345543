"""Shard sync without a stream or a table: which leases are created, with which checkpoint."""

from __future__ import annotations

import pytest

from kinesis_actors.leases import AT_TIMESTAMP, LATEST, TRIM_HORIZON, Lease
from kinesis_actors.leases._sync import Shard, ended_but_open, parse_shards, plan_new_leases

# 0 and 1 merged into 2 (closed); 2 split into 3 and 4 (open); 5 an untouched open root.
RESHARDED = [
    Shard("s3", ("s2",)),
    Shard("s0", closed=True),
    Shard("s1", closed=True),
    Shard("s2", ("s0", "s1"), closed=True),
    Shard("s4", ("s2",)),
    Shard("s5"),
]


def make(shard: Shard, checkpoint: str) -> Lease:
    return Lease(
        key=shard.shard_id,
        shard_id=shard.shard_id,
        checkpoint=checkpoint,
        parent_shard_ids=shard.parents,
    )


def plan(existing: set[str], initial: str) -> dict[str, str]:
    created = plan_new_leases(RESHARDED, existing, initial_position=initial, make_lease=make)
    return {lease.shard_id: lease.checkpoint for lease in created}


def test_an_empty_table_at_trim_horizon_gets_every_shard_parents_first() -> None:
    created = plan_new_leases(RESHARDED, set(), initial_position=TRIM_HORIZON, make_lease=make)
    order = [lease.shard_id for lease in created]
    assert sorted(order) == ["s0", "s1", "s2", "s3", "s4", "s5"]
    assert order.index("s2") > max(order.index("s0"), order.index("s1"))
    assert order.index("s3") > order.index("s2")
    assert {lease.checkpoint for lease in created} == {TRIM_HORIZON}


def test_an_empty_table_at_latest_skips_closed_shards() -> None:
    assert plan(set(), LATEST) == {"s3": LATEST, "s4": LATEST, "s5": LATEST}


def test_an_empty_table_at_a_timestamp_gets_every_shard_at_that_timestamp() -> None:
    assert set(plan(set(), AT_TIMESTAMP).values()) == {AT_TIMESTAMP}
    assert len(plan(set(), AT_TIMESTAMP)) == 6


def test_children_of_known_parents_start_at_trim_horizon_whatever_the_initial_position() -> None:
    assert plan({"s0", "s1", "s2", "s5"}, LATEST) == {"s3": TRIM_HORIZON, "s4": TRIM_HORIZON}


def test_shards_with_leases_are_left_alone() -> None:
    assert plan({"s0", "s1", "s2", "s3", "s4", "s5"}, TRIM_HORIZON) == {}


def test_a_grandchild_of_a_known_shard_starts_at_trim_horizon() -> None:
    assert plan({"s0", "s1", "s5"}, LATEST) == {
        "s2": TRIM_HORIZON,
        "s3": TRIM_HORIZON,
        "s4": TRIM_HORIZON,
    }


def test_an_unknown_initial_position_is_refused() -> None:
    with pytest.raises(ValueError, match="initial_position"):
        plan_new_leases(RESHARDED, set(), initial_position="AT_SEQUENCE_NUMBER", make_lease=make)


def test_list_shards_entries_are_parsed_with_lineage_state_and_hash_range() -> None:
    shards = parse_shards(
        [
            {
                "ShardId": "shardId-000000000002",
                "ParentShardId": "shardId-000000000000",
                "AdjacentParentShardId": "shardId-000000000001",
                "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": "99"},
                "SequenceNumberRange": {"StartingSequenceNumber": "1"},
            },
            {
                "ShardId": "shardId-000000000000",
                "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": "49"},
                "SequenceNumberRange": {"StartingSequenceNumber": "1", "EndingSequenceNumber": "9"},
            },
        ]
    )
    assert shards[0] == Shard(
        "shardId-000000000002", ("shardId-000000000000", "shardId-000000000001"), False, "0", "99"
    )
    assert shards[1].closed and shards[1].parents == ()


def test_a_lease_ended_before_a_listing_that_shows_its_shard_open_is_not_believed() -> None:
    shards = [Shard("a"), Shard("b", closed=True), Shard("c", ("b",))]
    assert ended_but_open({"a", "b"}, shards) == ["a"]  # "b" really ended: it is closed
    assert ended_but_open(set(), shards) == []
