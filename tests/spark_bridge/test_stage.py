"""The Spark source's staging area (``spark_bridge._stage``): sans-IO, no Spark, no server."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kinesis_actors.records import RECORD_SCHEMA, Aggregator, build_record_batch
from spark_bridge._stage import Plan, Stage

STREAM = "orders"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
TRIM = {"start": {"type": "TRIM_HORIZON"}}

Row = tuple[str, int]
"""A row's identity within its shard: (sequence number, sub-sequence number)."""


def key(shard: str) -> tuple[str, str]:
    return (STREAM, shard)


def start_doc(*shards: str, **entries: Mapping[str, Any]) -> dict[str, Any]:
    """A positions document with ``shards`` at TRIM_HORIZON and ``entries`` as given."""
    document: dict[str, Any] = {shard: dict(TRIM) for shard in shards}
    document.update({shard: dict(entry) for shard, entry in entries.items()})
    return {"version": 1, "streams": {STREAM: document}}


def batch(
    shard: str,
    first_sequence: int,
    count: int = 1,
    *,
    size: int | Sequence[int] = 3,
    arrival_ms: int | Sequence[int] = 1_000,
) -> pa.RecordBatch:
    """``count`` plain records with consecutive sequence numbers from ``first_sequence``."""
    sizes = [size] * count if isinstance(size, int) else list(size)
    stamps = [arrival_ms] * count if isinstance(arrival_ms, int) else list(arrival_ms)
    assert len(sizes) == count and len(stamps) == count
    records = [
        {
            "SequenceNumber": str(first_sequence + index),
            "ApproximateArrivalTimestamp": EPOCH + timedelta(milliseconds=stamps[index]),
            "Data": bytes([index % 256]) * sizes[index],
            "PartitionKey": f"pk-{index}",
        }
        for index in range(count)
    ]
    result = build_record_batch(STREAM, shard, records).batch
    assert result.schema == RECORD_SCHEMA
    return result


def aggregate(shard: str, sequence: int, count: int, *, size: int = 3) -> pa.RecordBatch:
    """One Kinesis record carrying a KPL aggregate of ``count`` user records."""
    aggregator = Aggregator()
    for index in range(count):
        assert aggregator.add(bytes([index]) * size, f"pk-{index}")
    record = aggregator.build()
    assert record.user_record_count == count
    kinesis_record = {
        "SequenceNumber": str(sequence),
        "ApproximateArrivalTimestamp": EPOCH + timedelta(seconds=1),
        "Data": record.data,
        "PartitionKey": record.partition_key,
        "ExplicitHashKey": record.explicit_hash_key,
    }
    return build_record_batch(STREAM, shard, [kinesis_record]).batch


def ids(batches: Sequence[pa.RecordBatch]) -> list[Row]:
    out: list[Row] = []
    for item in batches:
        out += zip(
            item.column("sequence_number").to_pylist(),
            item.column("sub_sequence_number").to_pylist(),
            strict=True,
        )
    return out


def taken(plan: Plan) -> dict[str, list[Row]]:
    return {shard: ids(batches) for (_, shard), batches in plan.batches.items()}


def data_bytes(batches: Sequence[pa.RecordBatch]) -> int:
    return sum(len(value) for item in batches for value in item.column("data").to_pylist())


def no_parents(_: tuple[str, str]) -> tuple[str, ...]:
    return ()


def lineage(**parents: tuple[str, ...]) -> Callable[[tuple[str, str]], tuple[str, ...]]:
    def lookup(shard_key: tuple[str, str]) -> tuple[str, ...]:
        assert shard_key[0] == STREAM
        return parents.get(shard_key[1], ())

    return lookup


def take(
    stage: Stage,
    start: Mapping[str, Any],
    *,
    max_rows: int | None = None,
    max_bytes: int | None = None,
    parents: Callable[[tuple[str, str]], tuple[str, ...]] = no_parents,
    check_nbytes: bool = True,
) -> Plan:
    """``Stage.take``, checking the invariants of every plan.

    ``check_nbytes=False`` leaves out ``plan.nbytes`` in the cutoff tests, so they test the
    cutoff; ``test_cutoff_plan_nbytes_counts_only_the_rows_taken`` tests it there.
    """
    plan = stage.take(start, max_rows=max_rows, max_bytes=max_bytes, parents=parents)
    batches = [item for shard_batches in plan.batches.values() for item in shard_batches]
    assert plan.rows == sum(item.num_rows for item in batches)
    if check_nbytes:
        assert plan.nbytes == data_bytes(batches)
    assert all(item.num_rows > 0 for item in batches)
    assert json.loads(json.dumps(plan.end)) == plan.end
    return plan


def entry(sequence: int | str, sub: int = 0) -> dict[str, Any]:
    return {"sequence_number": str(sequence), "sub_sequence_number": sub}


def shards_of(plan: Plan) -> dict[str, Any]:
    streams: dict[str, Any] = plan.end["streams"]
    assert plan.end["version"] == 1
    return dict(streams[STREAM])


FINISHED = {"finished": True}


# --- order and the end offset ----------------------------------------------------------------


def test_rows_are_taken_oldest_first_across_shards() -> None:
    stage = Stage((STREAM,))
    stage.add(key("a"), batch("a", 1, 3))
    stage.add(key("b"), batch("b", 10, 2))
    stage.add(key("a"), batch("a", 4, 2))

    plan = take(stage, start_doc("a", "b"), max_rows=4)

    # The four oldest staged rows: all of a's first read, then b's first row; not a's 4.
    assert taken(plan) == {"a": [("1", 0), ("2", 0), ("3", 0)], "b": [("10", 0)]}
    assert plan.rows == 4

    rest = take(stage, plan.end)
    assert taken(rest) == {"b": [("11", 0)], "a": [("4", 0), ("5", 0)]}
    assert len(stage) == 0


def test_end_offset_moves_touched_shards_and_keeps_the_others() -> None:
    stage = Stage((STREAM,))
    stage.add(key("a"), batch("a", 1, 3))
    stage.add(key("b"), batch("b", 20, 1))
    committed_c = entry(99, 4)
    latest_d = {"start": {"type": "LATEST"}}
    start = start_doc("a", b=entry(19), c=committed_c, d=latest_d)

    plan = take(stage, start)

    assert shards_of(plan) == {
        "a": entry(3),
        "b": entry(20),
        "c": committed_c,
        "d": latest_d,
    }


def test_plan_batches_concatenate_to_exactly_the_rows_taken() -> None:
    stage = Stage((STREAM,))
    first, second, other = batch("a", 1, 4), batch("a", 5, 4), batch("b", 1, 2)
    stage.add(key("a"), first)
    stage.add(key("b"), other)
    stage.add(key("a"), second)

    plan = take(stage, start_doc("a", "b"), max_rows=9)

    staged_a = pa.Table.from_batches([first, second])
    got_a = pa.Table.from_batches(plan.batches[key("a")])
    assert got_a.to_pylist() == staged_a.slice(0, 7).to_pylist()
    assert pa.Table.from_batches(plan.batches[key("b")]).to_pylist() == other.to_pylist()
    assert all(item.schema == RECORD_SCHEMA for items in plan.batches.values() for item in items)
    assert shards_of(plan)["a"] == entry(7)


def test_nothing_staged_gives_the_start_back() -> None:
    stage = Stage((STREAM,))
    start = start_doc("a", b=entry(5, 1))

    plan = take(stage, start, max_rows=10, max_bytes=10)

    assert plan.batches == {}
    assert plan.rows == 0
    assert plan.end == start


def test_rows_of_two_streams_each_land_in_their_own_stream() -> None:
    stage = Stage(("one", "two"))
    stage.add(("one", "a"), build_record_batch("one", "a", _plain(1, 2)).batch)
    stage.add(("two", "a"), build_record_batch("two", "a", _plain(7, 1)).batch)
    start = {"version": 1, "streams": {"one": {}, "two": {}}}

    plan = take(stage, start)

    assert plan.end == {
        "version": 1,
        "streams": {"one": {"a": entry(2)}, "two": {"a": entry(7)}},
    }


def _plain(first: int, count: int) -> list[dict[str, Any]]:
    return [
        {
            "SequenceNumber": str(first + index),
            "ApproximateArrivalTimestamp": EPOCH,
            "Data": b"x",
            "PartitionKey": "pk",
        }
        for index in range(count)
    ]


# --- max_rows ----------------------------------------------------------------------------------


def test_max_rows_cuts_a_batch_and_its_remainder_comes_first_next_time() -> None:
    stage = Stage((STREAM,))
    stage.add(key("a"), batch("a", 1, 5))
    stage.add(key("b"), batch("b", 10, 2))

    first = take(stage, start_doc("a", "b"), max_rows=3)
    assert taken(first) == {"a": [("1", 0), ("2", 0), ("3", 0)]}
    assert shards_of(first) == {"a": entry(3), "b": TRIM}

    second = take(stage, first.end, max_rows=3)
    assert taken(second) == {"a": [("4", 0), ("5", 0)], "b": [("10", 0)]}
    assert shards_of(second) == {"a": entry(5), "b": entry(10)}

    third = take(stage, second.end, max_rows=3)
    assert taken(third) == {"b": [("11", 0)]}
    assert len(stage) == 0


def test_max_rows_stops_exactly_at_the_limit_between_batches() -> None:
    stage = Stage((STREAM,))
    stage.add(key("a"), batch("a", 1, 2))
    stage.add(key("b"), batch("b", 1, 2))

    plan = take(stage, start_doc("a", "b"), max_rows=2)

    assert taken(plan) == {"a": [("1", 0), ("2", 0)]}
    assert shards_of(plan)["b"] == TRIM
    assert stage.records == 2


# A staged item: (shard index, number of rows, data size of each of its rows).
_items = st.lists(
    st.tuples(st.integers(0, 2), st.integers(1, 6), st.integers(0, 12)),
    min_size=1,
    max_size=12,
)


@settings(max_examples=120, deadline=None)
@given(
    items=_items,
    max_rows=st.none() | st.integers(1, 8),
    max_bytes=st.none() | st.integers(1, 40),
)
def test_takes_partition_the_staged_rows_in_order(
    items: list[tuple[int, int, int]], max_rows: int | None, max_bytes: int | None
) -> None:
    stage = Stage((STREAM,))
    shards = ["s0", "s1", "s2"]
    staged: dict[str, list[Row]] = {shard: [] for shard in shards}
    next_sequence = dict.fromkeys(shards, 1)
    for index, rows, size in items:
        shard = shards[index]
        arrow = batch(shard, next_sequence[shard], rows, size=size)
        next_sequence[shard] += rows
        staged[shard] += ids([arrow])
        stage.add(key(shard), arrow)
    total_rows = sum(len(rows) for rows in staged.values())
    assert stage.records == total_rows

    got: dict[str, list[Row]] = {shard: [] for shard in shards}
    start = start_doc(*shards)
    remaining_rows, remaining_bytes = total_rows, stage.nbytes
    for _ in range(total_rows + 1):
        if stage.records == 0:
            break
        plan = take(stage, start, max_rows=max_rows, max_bytes=max_bytes)
        assert plan.rows > 0, "a take with rows staged made no progress"
        if max_rows is not None:
            assert plan.rows <= max_rows
        if max_bytes is not None and plan.nbytes > max_bytes:
            assert plan.rows == 1, "only a lone oversized row may exceed max_bytes"
        for shard, shard_rows in taken(plan).items():
            got[shard] += shard_rows
        remaining_rows -= plan.rows
        remaining_bytes -= plan.nbytes
        assert stage.records == remaining_rows
        assert stage.nbytes == remaining_bytes
        # The end offset is the last row taken so far, or the start for untouched shards.
        expected = {shard: entry(*got[shard][-1]) if got[shard] else TRIM for shard in shards}
        assert shards_of(plan) == expected
        start = plan.end
    assert stage.records == 0
    assert stage.nbytes == 0
    assert len(stage) == 0
    assert got == staged


# --- max_bytes ---------------------------------------------------------------------------------


def test_max_bytes_is_never_exceeded() -> None:
    stage = Stage((STREAM,))
    stage.add(key("a"), batch("a", 1, 3, size=4))
    stage.add(key("b"), batch("b", 1, 1, size=4))

    first = take(stage, start_doc("a", "b"), max_bytes=10)
    assert taken(first) == {"a": [("1", 0), ("2", 0)]}
    assert first.nbytes == 8

    second = take(stage, first.end, max_bytes=10)
    assert taken(second) == {"a": [("3", 0)], "b": [("1", 0)]}
    assert second.nbytes == 8


def test_max_bytes_limit_is_inclusive() -> None:
    stage = Stage((STREAM,))
    stage.add(key("a"), batch("a", 1, 3, size=5))

    plan = take(stage, start_doc("a"), max_bytes=10)

    assert plan.rows == 2
    assert plan.nbytes == 10


def test_a_row_larger_than_max_bytes_is_taken_alone_first() -> None:
    stage = Stage((STREAM,))
    stage.add(key("a"), batch("a", 1, 2, size=[50, 1]))
    stage.add(key("b"), batch("b", 1, 1, size=1))

    first = take(stage, start_doc("a", "b"), max_bytes=10)
    assert taken(first) == {"a": [("1", 0)]}
    assert first.nbytes == 50

    second = take(stage, first.end, max_bytes=10)
    assert taken(second) == {"a": [("2", 0)], "b": [("1", 0)]}


def test_a_row_larger_than_max_bytes_waits_when_something_else_is_taken() -> None:
    stage = Stage((STREAM,))
    stage.add(key("a"), batch("a", 1, 1, size=4))
    stage.add(key("b"), batch("b", 1, 1, size=50))
    stage.add(key("c"), batch("c", 1, 1, size=1))

    first = take(stage, start_doc("a", "b", "c"), max_bytes=10)
    # b's row does not fit and is not first; c is younger than b, so the cut stops there.
    assert taken(first) == {"a": [("1", 0)]}
    assert shards_of(first)["b"] == TRIM

    second = take(stage, first.end, max_bytes=10)
    assert taken(second) == {"b": [("1", 0)]}
    third = take(stage, second.end, max_bytes=10)
    assert taken(third) == {"c": [("1", 0)]}


def test_max_rows_and_max_bytes_together_take_the_tighter() -> None:
    stage = Stage((STREAM,))
    stage.add(key("a"), batch("a", 1, 10, size=2))

    assert take(stage, start_doc("a"), max_rows=3, max_bytes=100).rows == 3
    assert take(stage, start_doc("a"), max_rows=100, max_bytes=5).rows == 2


# --- finished markers --------------------------------------------------------------------------


def test_finished_marker_applies_only_once_the_rows_before_it_are_taken() -> None:
    stage = Stage((STREAM,))
    stage.add(key("a"), batch("a", 1, 4))
    stage.add_finished(key("a"))

    first = take(stage, start_doc("a"), max_rows=2)
    assert shards_of(first)["a"] == entry(2)

    second = take(stage, first.end, max_rows=10)
    assert taken(second) == {"a": [("3", 0), ("4", 0)]}
    assert shards_of(second)["a"] == FINISHED
    assert len(stage) == 0


def test_finished_marker_waits_behind_a_cut_of_another_shard() -> None:
    stage = Stage((STREAM,))
    stage.add(key("b"), batch("b", 1, 3))
    stage.add_finished(key("a"))

    first = take(stage, start_doc("a", "b"), max_rows=2)
    assert shards_of(first)["a"] == TRIM

    second = take(stage, first.end, max_rows=2)
    assert shards_of(second) == {"a": FINISHED, "b": entry(3)}


def test_finished_marker_alone_finishes_the_shard() -> None:
    stage = Stage((STREAM,))
    stage.add_finished(key("a"))

    plan = take(stage, start_doc("a", b=entry(3)))

    assert plan.rows == 0
    assert shards_of(plan) == {"a": FINISHED, "b": entry(3)}
    assert len(stage) == 0


def test_finished_marker_never_hides_rows_left_staged() -> None:
    # Whatever the limits, an offset that says finished has every row of the shard taken.
    for max_rows in range(1, 7):
        stage = Stage((STREAM,))
        stage.add(key("a"), batch("a", 1, 3))
        stage.add(key("a"), batch("a", 4, 2))
        stage.add_finished(key("a"))
        start = start_doc("a")
        seen: list[Row] = []
        for _ in range(10):
            plan = take(stage, start, max_rows=max_rows)
            seen += taken(plan).get("a", [])
            if shards_of(plan)["a"] == FINISHED:
                assert len(seen) == 5, max_rows
                break
            start = plan.end
        else:
            pytest.fail(f"never finished with max_rows={max_rows}")


# --- parents and children ----------------------------------------------------------------------


def test_child_rows_wait_for_a_take_without_their_parents_rows() -> None:
    parents = lineage(child=("parent",))
    stage = Stage((STREAM,))
    stage.add(key("parent"), batch("parent", 1, 2))
    stage.add_finished(key("parent"))
    stage.add(key("child"), batch("child", 100, 2))

    first = take(stage, start_doc("parent", "child"), parents=parents)
    assert taken(first) == {"parent": [("1", 0), ("2", 0)]}
    assert shards_of(first) == {"parent": FINISHED, "child": TRIM}

    second = take(stage, first.end, parents=parents)
    assert taken(second) == {"child": [("100", 0), ("101", 0)]}
    assert shards_of(second) == {"parent": FINISHED, "child": entry(101)}


def test_a_blocked_shards_later_items_wait_too() -> None:
    parents = lineage(child=("parent",))
    stage = Stage((STREAM,))
    stage.add(key("parent"), batch("parent", 1, 1))
    stage.add_finished(key("parent"))
    stage.add(key("child"), batch("child", 100, 1))
    stage.add(key("other"), batch("other", 1, 1))
    stage.add(key("child"), batch("child", 101, 1))
    stage.add_finished(key("child"))

    first = take(stage, start_doc("parent", "child", "other"), parents=parents)
    # Blocking is per shard: an unrelated shard staged later is still taken.
    assert taken(first) == {"parent": [("1", 0)], "other": [("1", 0)]}
    assert shards_of(first)["child"] == TRIM
    assert stage.records == 2

    second = take(stage, first.end, parents=parents)
    assert taken(second) == {"child": [("100", 0), ("101", 0)]}
    assert shards_of(second)["child"] == FINISHED


def test_merge_child_waits_for_either_parent() -> None:
    parents = lineage(child=("left", "right"))
    stage = Stage((STREAM,))
    stage.add_finished(key("left"))
    stage.add(key("right"), batch("right", 1, 1))
    stage.add_finished(key("right"))
    stage.add(key("child"), batch("child", 50, 1))

    first = take(stage, start_doc("left", "right", "child"), parents=parents)
    assert taken(first) == {"right": [("1", 0)]}
    assert shards_of(first) == {"left": FINISHED, "right": FINISHED, "child": TRIM}

    second = take(stage, first.end, parents=parents)
    assert taken(second) == {"child": [("50", 0)]}


def test_grandchild_waits_behind_a_blocked_child() -> None:
    parents = lineage(child=("parent",), grandchild=("child",))
    stage = Stage((STREAM,))
    stage.add(key("parent"), batch("parent", 1, 1))
    stage.add_finished(key("parent"))
    stage.add(key("child"), batch("child", 10, 1))
    stage.add_finished(key("child"))
    stage.add(key("grandchild"), batch("grandchild", 20, 1))
    start = start_doc("parent", "child", "grandchild")

    rounds: list[dict[str, list[Row]]] = []
    for _ in range(3):
        plan = take(stage, start, parents=parents)
        rounds.append(taken(plan))
        start = plan.end

    assert rounds == [
        {"parent": [("1", 0)]},
        {"child": [("10", 0)]},
        {"grandchild": [("20", 0)]},
    ]
    assert shards_of(plan) == {"parent": FINISHED, "child": FINISHED, "grandchild": entry(20)}


def test_child_may_follow_a_parent_that_only_finished_in_the_same_take() -> None:
    parents = lineage(child=("parent",))
    stage = Stage((STREAM,))
    stage.add_finished(key("parent"))
    stage.add(key("child"), batch("child", 10, 1))

    plan = take(stage, start_doc("parent", "child"), parents=parents)

    assert taken(plan) == {"child": [("10", 0)]}
    assert shards_of(plan) == {"parent": FINISHED, "child": entry(10)}


# --- AvailableNow cutoff -----------------------------------------------------------------------


def test_cutoff_takes_the_earlier_rows_and_stops_the_shard_for_good() -> None:
    stage = Stage((STREAM,))
    stage.cutoff_ms = 2_000
    stage.add(key("a"), batch("a", 1, 4, arrival_ms=[1_000, 2_000, 2_001, 1_500]))
    stage.add(key("b"), batch("b", 1, 1, arrival_ms=1_000))

    first = take(stage, start_doc("a", "b"), check_nbytes=False)

    # A row at the cutoff is read; the first one after it ends the shard, even though a
    # later row of the same read arrived earlier.
    assert taken(first) == {"a": [("1", 0), ("2", 0)], "b": [("1", 0)]}
    assert shards_of(first) == {"a": entry(2), "b": entry(1)}
    assert stage.past_cutoff(key("a"))
    assert not stage.past_cutoff(key("b"))

    stage.add(key("a"), batch("a", 5, 1, arrival_ms=1_000))
    assert len(stage) == 0
    assert stage.records == 0
    stage.add_finished(key("a"))
    stage.add(key("b"), batch("b", 2, 1, arrival_ms=1_900))

    second = take(stage, first.end, check_nbytes=False)
    assert taken(second) == {"b": [("2", 0)]}
    assert shards_of(second) == {"a": entry(2), "b": entry(2)}
    assert len(stage) == 0


def test_cutoff_drops_a_read_whose_first_row_is_late() -> None:
    stage = Stage((STREAM,))
    stage.cutoff_ms = 2_000
    stage.add(key("a"), batch("a", 1, 2, arrival_ms=3_000))
    stage.add(key("a"), batch("a", 3, 1, arrival_ms=1_000))

    plan = take(stage, start_doc("a"), check_nbytes=False)

    assert plan.rows == 0
    assert shards_of(plan) == {"a": TRIM}
    assert stage.past_cutoff(key("a"))
    assert len(stage) == 0
    assert (stage.records, stage.nbytes) == (0, 0)


def test_cutoff_drops_the_rest_of_the_shards_staged_reads() -> None:
    stage = Stage((STREAM,))
    stage.cutoff_ms = 2_000
    stage.add(key("a"), batch("a", 1, 2, arrival_ms=[1_000, 2_500]))
    stage.add(key("a"), batch("a", 3, 1, arrival_ms=1_000))
    stage.add_finished(key("a"))

    plan = take(stage, start_doc("a"), check_nbytes=False)

    assert taken(plan) == {"a": [("1", 0)]}
    assert shards_of(plan) == {"a": entry(1)}
    assert take(stage, plan.end, check_nbytes=False).rows == 0
    assert len(stage) == 0


def test_cutoff_rows_before_the_cutoff_survive_a_max_rows_cut() -> None:
    # Rows 1..3 arrived by the cutoff, row 4 after it; max_rows cuts the read after row 2.
    # Row 3 was read under the cutoff and must come in the next take.
    stage = Stage((STREAM,))
    stage.cutoff_ms = 2_000
    stage.add(key("a"), batch("a", 1, 4, arrival_ms=[1_000, 1_000, 1_000, 3_000]))

    first = take(stage, start_doc("a"), max_rows=2, check_nbytes=False)
    assert taken(first) == {"a": [("1", 0), ("2", 0)]}

    second = take(stage, first.end, max_rows=2, check_nbytes=False)
    assert taken(second) == {"a": [("3", 0)]}
    assert shards_of(second) == {"a": entry(3)}


def test_cutoff_rows_before_the_cutoff_survive_a_max_bytes_stop() -> None:
    # b's read has a late row, but max_bytes is already used up when the walk reaches it:
    # its rows before the cutoff must still come in the next take.
    stage = Stage((STREAM,))
    stage.cutoff_ms = 2_000
    stage.add(key("a"), batch("a", 1, 1, size=10))
    stage.add(key("b"), batch("b", 1, 2, size=5, arrival_ms=[1_000, 3_000]))

    first = take(stage, start_doc("a", "b"), max_bytes=10, check_nbytes=False)
    assert taken(first) == {"a": [("1", 0)]}

    second = take(stage, first.end, max_bytes=10, check_nbytes=False)
    assert taken(second) == {"b": [("1", 0)]}
    assert shards_of(second) == {"a": entry(1), "b": entry(1)}


def test_counters_after_a_cut_of_a_read_with_late_rows() -> None:
    # Only rows 2 and 3 (before the cutoff) are left to take; row 4 (late) is gone.
    stage = Stage((STREAM,))
    stage.cutoff_ms = 2_000
    stage.add(key("a"), batch("a", 1, 4, size=[1, 2, 4, 8], arrival_ms=[1, 1, 1, 3_000]))

    take(stage, start_doc("a"), max_rows=1, check_nbytes=False)

    assert stage.records == 2
    assert stage.nbytes == 2 + 4


def test_cutoff_plan_nbytes_counts_only_the_rows_taken() -> None:
    # a's read: a 1-byte row by the cutoff, a 100-byte row after it. Only 1 byte is taken,
    # so b's 5-byte row still fits in max_bytes=10 in the same take.
    stage = Stage((STREAM,))
    stage.cutoff_ms = 2_000
    stage.add(key("a"), batch("a", 1, 2, size=[1, 100], arrival_ms=[1_000, 3_000]))
    stage.add(key("b"), batch("b", 1, 1, size=5))

    plan = take(stage, start_doc("a", "b"), max_bytes=10, check_nbytes=False)

    assert taken(plan) == {"a": [("1", 0)], "b": [("1", 0)]}, f"plan.nbytes={plan.nbytes}"
    assert plan.nbytes == 1 + 5


# --- sub-sequence numbers ----------------------------------------------------------------------


def test_aggregate_split_across_takes_resumes_at_the_next_sub_sequence() -> None:
    stage = Stage((STREAM,))
    stage.add(key("a"), aggregate("a", 7, 5))
    stage.add(key("a"), batch("a", 8, 1))

    first = take(stage, start_doc("a"), max_rows=3)
    assert taken(first) == {"a": [("7", 0), ("7", 1), ("7", 2)]}
    assert shards_of(first) == {"a": entry(7, 2)}

    second = take(stage, first.end, max_rows=2)
    assert taken(second) == {"a": [("7", 3), ("7", 4)]}
    assert shards_of(second) == {"a": entry(7, 4)}

    third = take(stage, second.end)
    assert taken(third) == {"a": [("8", 0)]}
    assert shards_of(third) == {"a": entry(8, 0)}


def test_aggregate_split_by_max_bytes_resumes_at_the_next_sub_sequence() -> None:
    stage = Stage((STREAM,))
    stage.add(key("a"), aggregate("a", 7, 4, size=6))

    first = take(stage, start_doc("a"), max_bytes=13)
    assert shards_of(first) == {"a": entry(7, 1)}
    second = take(stage, first.end, max_bytes=13)
    assert taken(second) == {"a": [("7", 2), ("7", 3)]}


# --- counters ----------------------------------------------------------------------------------


def test_counters_track_what_is_left_after_each_take() -> None:
    stage = Stage((STREAM,))
    stage.add(key("a"), batch("a", 1, 3, size=[1, 2, 3]))
    stage.add(key("b"), batch("b", 1, 2, size=[10, 20]))
    stage.add_finished(key("b"))
    assert (stage.records, stage.nbytes, len(stage)) == (5, 36, 3)

    start = take(stage, start_doc("a", "b"), max_rows=2).end
    assert (stage.records, stage.nbytes) == (3, 33)

    start = take(stage, start, max_bytes=13).end
    assert (stage.records, stage.nbytes) == (1, 20)

    take(stage, start)
    assert (stage.records, stage.nbytes, len(stage)) == (0, 0, 0)


def test_empty_reads_are_not_staged() -> None:
    stage = Stage((STREAM,))
    stage.add(key("a"), pa.RecordBatch.from_pylist([], schema=RECORD_SCHEMA))
    assert (stage.records, stage.nbytes, len(stage)) == (0, 0, 0)


# --- determinism -------------------------------------------------------------------------------


def _staged_for_replay() -> Stage:
    stage = Stage((STREAM,))
    stage.add(key("z"), batch("z", 1, 3, size=4))
    stage.add(key("parent"), batch("parent", 1, 2))
    stage.add_finished(key("parent"))
    stage.add(key("child"), aggregate("child", 40, 3))
    stage.add(key("m"), batch("m", 9, 2, size=[30, 1]))
    stage.add_finished(key("z"))
    return stage


@pytest.mark.parametrize(("max_rows", "max_bytes"), [(None, None), (4, None), (None, 11), (2, 9)])
def test_take_is_deterministic(max_rows: int | None, max_bytes: int | None) -> None:
    parents = lineage(child=("parent",))
    start: dict[str, Any] = start_doc("parent", a=entry(3, 1))
    ends: list[list[str]] = []
    for _ in range(2):
        stage = _staged_for_replay()
        chain: list[str] = []
        position: Mapping[str, Any] = start
        for _ in range(8):
            plan = take(stage, position, max_rows=max_rows, max_bytes=max_bytes, parents=parents)
            chain.append(json.dumps(plan.end))
            position = plan.end
        ends.append(chain)
        assert len(stage) == 0
    # Equal as JSON text, not only as data: shard entries come in a stable order.
    assert ends[0] == ends[1]
    assert list(json.loads(ends[0][-1])["streams"][STREAM]) == ["a", "child", "m", "parent", "z"]
