"""The ``startingPositions`` source option: parsed and checked before any call, and the
initial offset it makes with the stream's listing. No Spark session, no server."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest

from kinesis_actors import StartingPosition
from kinesis_actors.consumer import SavedShard, encode_positions
from kinesis_actors.errors import ConfigError
from kinesis_actors.records import Position
from spark_bridge._offsets import Bound, ShardEntry
from spark_bridge._options import parse_source_options
from spark_bridge._policy import ShardInfo
from spark_bridge._starts import initial_entries, parse_starting_positions

SEQ = "49680651651569123713072997905875369669620986768321937410"
SHARD0 = "shardId-000000000000"
SHARD1 = "shardId-000000000001"


def starts(
    raw: object, streams: tuple[str, ...] = ("orders",)
) -> dict[tuple[str, str], ShardEntry]:
    return parse_starting_positions(json.dumps(raw), streams)


def test_a_consumers_positions_document_is_taken_as_it_is_mid_aggregate_included() -> None:
    document = encode_positions(
        {
            ("orders", SHARD0): SavedShard(committed=Position(SEQ, 3)),
            ("orders", SHARD1): SavedShard(finished=True),
        },
        ["orders"],
    )
    parsed = starts(document)
    assert parsed[("orders", SHARD0)] == ShardEntry(bound=Bound(int(SEQ), 3))
    assert parsed[("orders", SHARD0)].iterator_params()["ShardIteratorType"] == (
        "AT_SEQUENCE_NUMBER"  # at the aggregate, its first four user records dropped
    )
    assert parsed[("orders", SHARD1)] == ShardEntry(finished=True)


def test_the_short_forms_name_streams_or_only_shards_of_the_one_stream() -> None:
    entry = {"start": {"type": "AFTER_SEQUENCE_NUMBER", "sequence_number": SEQ}}
    by_stream = starts({"orders": {SHARD0: entry}}, ("orders", "refunds"))
    assert by_stream == {
        ("orders", SHARD0): ShardEntry(start=StartingPosition.after_sequence_number(SEQ))
    }
    stamp = {"start": {"type": "AT_TIMESTAMP", "timestamp": "2026-11-01T00:00:00+00:00"}}
    by_shard = starts({SHARD0: stamp})
    assert by_shard == {
        ("orders", SHARD0): ShardEntry(
            start=StartingPosition.at_timestamp(datetime(2026, 11, 1, tzinfo=UTC))
        )
    }


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("{not json", "is not JSON"),
        ("[1, 2]", "must be a JSON object"),
        (json.dumps({SHARD0: {"sequence_number": "12x"}}), f"orders/{SHARD0}: sequence_number"),
        (
            json.dumps({SHARD0: {"sequence_number": SEQ, "sub_sequence_number": -1}}),
            f"orders/{SHARD0}: sub_sequence_number must be an integer >= 0",
        ),
        (json.dumps({SHARD0: {"start": {"type": "SOMEWHERE"}}}), f"orders/{SHARD0}"),
        (
            json.dumps({SHARD0: {"start": {"type": "AT_TIMESTAMP", "timestamp": "yesterday"}}}),
            "bad timestamp 'yesterday'",
        ),
        (json.dumps({SHARD0: {"position": 4}}), "has neither a position, a start nor finished"),
        (
            json.dumps({"version": 1, "streams": {"refunds": {}}}),
            "names streams this consumer does not read: ['refunds']",
        ),
    ],
)
def test_a_bad_map_fails_with_the_option_the_shard_and_the_problem(raw: str, problem: str) -> None:
    with pytest.raises(ConfigError, match="option startingPositions") as caught:
        parse_source_options({"streamName": "orders", "startingPositions": raw})
    assert re.search(re.escape(problem), str(caught.value)), caught.value


def _listing(*shards: tuple[str, tuple[str, ...]]) -> dict[tuple[str, str], ShardInfo]:
    return {("orders", shard): ShardInfo(parents) for shard, parents in shards}


def test_unnamed_shards_start_at_the_initial_position_and_children_of_named_ones_wait() -> None:
    named = {("orders", "p"): ShardEntry(bound=Bound(int(SEQ), 0))}
    listed = _listing(("p", ()), ("c1", ("p",)), ("c2", ("p",)), ("gc", ("c1", "c2")), ("o", ()))
    latest = StartingPosition.at_timestamp(datetime(2026, 11, 1, tzinfo=UTC))
    entries = initial_entries(named, listed, latest)
    # The named shard where it says, an unrelated shard at the default; the descendants of
    # the named shard are left for the planner (after their parents, from their trim horizon).
    assert entries == {
        ("orders", "p"): named[("orders", "p")],
        ("orders", "o"): ShardEntry(start=latest),
    }
    # With TRIM_HORIZON every unnamed shard is left for the first plan.
    assert initial_entries(named, listed, None) == named


def test_unnamed_ancestors_of_a_named_shard_count_as_finished_and_are_not_read_again() -> None:
    named = {("orders", "c1"): ShardEntry(bound=Bound(int(SEQ), 0))}
    listed = _listing(("gp", ()), ("p", ("gp",)), ("c1", ("p",)), ("c2", ("p",)), ("o", ()))
    entries = initial_entries(named, listed, None)
    assert entries == {
        ("orders", "c1"): named[("orders", "c1")],
        ("orders", "p"): ShardEntry(finished=True),
        ("orders", "gp"): ShardEntry(finished=True),
    }  # c2, a sibling, and o are left for the first plan (TRIM_HORIZON)


def test_a_named_shard_the_stream_does_not_list_is_named_in_the_error() -> None:
    named = {("orders", "shardId-000000000007"): ShardEntry(finished=True)}
    with pytest.raises(ConfigError, match="names shard 'shardId-000000000007' of stream 'orders'"):
        initial_entries(named, _listing(("shardId-000000000000", ())), None)
