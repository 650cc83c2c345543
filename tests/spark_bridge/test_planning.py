"""The source's offsets, the planner's policy and the range reader's exactness, with no
server and no loop for the sans-IO parts (``_offsets``, ``_policy``) and a scripted fake
client for the range reader."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pyarrow as pa
import pytest

from kinesis_actors.errors import ConfigError, MalformedReplyError, PositionsMismatchError
from kinesis_actors.records import Aggregator
from spark_bridge._offsets import (
    AFTER,
    BEFORE,
    Bound,
    Offset,
    ShardEntry,
    StreamIdentity,
    changed_shards,
    check_identity,
    parse_offset,
)
from spark_bridge._policy import (
    PlannerSettings,
    Seen,
    ShardInfo,
    add_new_shards,
    after_tail,
    anchor_cut,
    check_records_reply,
    cut_time,
    eligible,
    shares,
)
from spark_bridge._range import RangeReader, RangeReadError, ShardRange, _read_all

S = "orders"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# --- offsets ---------------------------------------------------------------------------------


def test_every_entry_form_round_trips_through_json() -> None:
    offset = Offset(
        shards={
            (S, "a"): ShardEntry(bound=Bound(10, BEFORE), arrival_ms=5),
            (S, "b"): ShardEntry(bound=Bound(11, AFTER), arrival_ms=6),
            (S, "c"): ShardEntry(bound=Bound(12, 3)),
            (S, "d"): ShardEntry(finished=True),
            (S, "e"): ShardEntry(),
        },
        identities={S: StreamIdentity("arn:x", 123)},
    )
    document = offset.to_json((S,))
    assert document["streams"][S]["shards"] == {
        "a": {"before": "10", "ms": 5},
        "b": {"after": "11", "ms": 6},
        "c": {"sequence_number": "12", "sub_sequence_number": 3},
        "d": {"finished": True},
        "e": {"start": {"type": "TRIM_HORIZON"}},
    }
    again = parse_offset(document, (S,))
    assert again.to_json((S,)) == document and again.identities == offset.identities


def test_a_version_1_offset_loads_without_identity() -> None:
    old = {"version": 1, "streams": {S: {"a": {"sequence_number": "7", "sub_sequence_number": 2}}}}
    parsed = parse_offset(old, (S,))
    assert parsed.shards[(S, "a")].bound == Bound(7, 2) and parsed.identities == {}


@pytest.mark.parametrize(
    "document",
    [
        {"version": 3, "streams": {}},
        {"version": 2, "streams": {"other": {"shards": {}}}},
        {"version": 2, "streams": {S: {"shards": {"a": {"before": "12x"}}}}},
        {"version": 2, "streams": {S: {"shards": {"a": {"before": "1" * 130}}}}},
        {"version": 2, "streams": {S: {"shards": {"a": {"what": 1}}}}},
        {"version": 2, "streams": {S: {"arn": "x", "shards": {}}}},
        [],
    ],
)
def test_a_bad_offset_says_what_is_wrong_and_what_to_do(document: Any) -> None:
    with pytest.raises(ConfigError, match="new checkpointLocation"):
        parse_offset(document, (S,))


def test_an_offset_from_another_incarnation_of_the_stream_is_refused() -> None:
    saved = StreamIdentity("arn:aws:kinesis:r:1:stream/orders", 1000)
    check_identity(S, saved, saved)
    check_identity(S, None, saved)  # version 1: nothing to compare
    with pytest.raises(PositionsMismatchError, match="deleted and created again"):
        check_identity(S, saved, StreamIdentity(saved.arn, 2000))


def test_bounds_order_user_records_and_start_past_their_cut() -> None:
    before, inside, after = Bound(5, BEFORE), Bound(5, 2), Bound(5, AFTER)
    assert not before.includes(5, 0) and before.includes(4, 99)
    assert inside.includes(5, 2) and not inside.includes(5, 3)
    assert after.includes(5, 10_000) and not after.includes(6, 0)
    assert before < inside < after
    assert before.iterator_params()["ShardIteratorType"] == "AT_SEQUENCE_NUMBER"
    assert inside.iterator_params()["ShardIteratorType"] == "AT_SEQUENCE_NUMBER"
    assert after.iterator_params()["ShardIteratorType"] == "AFTER_SEQUENCE_NUMBER"


def test_changed_shards_are_the_moved_and_the_new_ones() -> None:
    start = Offset(shards={(S, "a"): ShardEntry(bound=Bound(1, AFTER)), (S, "b"): ShardEntry()})
    end = Offset(
        shards={
            (S, "a"): ShardEntry(bound=Bound(1, AFTER)),
            (S, "b"): ShardEntry(bound=Bound(3, BEFORE)),
            (S, "c"): ShardEntry(finished=True),
        }
    )
    assert [key for key, _, _ in changed_shards(start, end)] == [(S, "b"), (S, "c")]


# --- policy ----------------------------------------------------------------------------------


def test_the_cut_time_is_the_settle_lag_behind_now_or_one_window_past_the_first_record() -> None:
    settings = PlannerSettings(window_ms=10_000, settle_ms=1_000)
    caught_up = cut_time(settings, now_ms=100_000, first=Seen(1, 95_000), target_ms=None)
    assert (caught_up.ms, caught_up.final) == (99_000, True)
    backlog = cut_time(settings, now_ms=100_000, first=Seen(1, 20_000), target_ms=None)
    assert (backlog.ms, backlog.final) == (30_000, False)
    available_now = cut_time(settings, now_ms=100_000, first=Seen(1, 95_000), target_ms=99_500)
    assert (available_now.ms, available_now.final) == (99_500, True)


def test_an_anchor_cuts_just_before_it_and_never_at_or_before_the_start() -> None:
    entry = ShardEntry(bound=Bound(10, AFTER))
    first = Seen(11, 100)
    assert anchor_cut(entry, first, Seen(15, 200)) == ShardEntry(
        bound=Bound(15, BEFORE), arrival_ms=200
    )
    assert anchor_cut(entry, first, first) is None  # nothing before the anchor
    assert anchor_cut(entry, first, Seen(9, 300)) is None  # out-of-order arrival times
    inside = ShardEntry(bound=Bound(11, 4))  # a cut inside the first record's aggregate
    assert anchor_cut(inside, first, Seen(12, 1)) == ShardEntry(
        bound=Bound(12, BEFORE), arrival_ms=1
    )
    assert after_tail(entry, Seen(13, 5)) == ShardEntry(bound=Bound(13, AFTER), arrival_ms=5)
    assert after_tail(entry, Seen(10, 5)) is None


def test_a_child_waits_until_every_parent_is_finished_in_the_start_offset() -> None:
    listing = {
        (S, "p"): ShardInfo(),
        (S, "q"): ShardInfo(),
        (S, "c"): ShardInfo(("p", "q")),
        (S, "orphan"): ShardInfo(("expired",)),
    }
    offset = Offset(shards={(S, "p"): ShardEntry(finished=True), (S, "q"): ShardEntry()})
    assert not eligible((S, "c"), listing, offset)
    offset.shards[(S, "q")] = ShardEntry(finished=True)
    assert eligible((S, "c"), listing, offset)
    assert eligible((S, "orphan"), listing, offset), "an expired parent holds nothing back"
    fresh = Offset()
    assert add_new_shards(fresh, listing, (S,)) == sorted(listing)
    assert not eligible((S, "c"), listing, fresh), "parents just discovered come first"


@pytest.mark.parametrize(
    "reply",
    [
        {},
        {"Records": None, "NextShardIterator": "i", "MillisBehindLatest": 0},
        {"Records": [], "MillisBehindLatest": 0},  # no next iterator, no ChildShards
        {"Records": [], "NextShardIterator": "i"},  # no MillisBehindLatest
        {"Records": [], "NextShardIterator": 5, "MillisBehindLatest": 0},
        [],
    ],
)
def test_a_reply_that_cannot_be_believed_is_malformed_never_an_end(reply: Any) -> None:
    with pytest.raises(MalformedReplyError):
        check_records_reply(reply, where="s/a")


def test_only_a_reply_with_child_shards_and_no_iterator_ends_a_shard() -> None:
    ended = check_records_reply({"Records": [], "ChildShards": []}, where="s/a")
    assert ended.ended and ended.next_iterator is None
    going = check_records_reply(
        {"Records": [], "NextShardIterator": "i", "MillisBehindLatest": 3}, where="s/a"
    )
    assert not going.ended and going.millis_behind == 3


def test_shares_split_evenly_and_add_up() -> None:
    assert shares(10, 3) == [4, 3, 3]
    assert shares(2, 4) == [1, 1, 0, 0]
    assert sum(shares(1001, 7)) == 1001


# --- the range reader, on a scripted shard -----------------------------------------------------


class FakeShard:
    """A shard of Kinesis records served page by page; ``hide`` answers the first N
    GetRecords with "nothing yet" (a visibility lag)."""

    def __init__(self, records: list[dict[str, Any]], *, page: int = 3, hide: int = 0) -> None:
        self.records = records
        self.page = page
        self.hide = hide
        self.calls: list[str] = []

    async def call(
        self, operation: str, params: dict[str, Any], *, epoch_timestamps: bool = False
    ) -> dict[str, Any]:
        self.calls.append(operation)
        if operation == "GetShardIterator":
            kind = params["ShardIteratorType"]
            sequence = int(params.get("StartingSequenceNumber", 0))
            index = 0
            for index, record in enumerate(self.records):  # noqa: B007
                number = int(record["SequenceNumber"])
                if (kind == "AT_SEQUENCE_NUMBER" and number >= sequence) or (
                    kind == "AFTER_SEQUENCE_NUMBER" and number > sequence
                ):
                    break
            else:
                index = len(self.records) if kind != "TRIM_HORIZON" else 0
            return {"ShardIterator": str(index)}
        index = int(params["ShardIterator"])
        if self.hide:
            self.hide -= 1
            return {"Records": [], "NextShardIterator": str(index), "MillisBehindLatest": 0}
        chunk = self.records[index : index + self.page]
        return {
            "Records": chunk,
            "NextShardIterator": str(index + len(chunk)),
            "MillisBehindLatest": 0 if index + len(chunk) >= len(self.records) else 100,
        }


def plain(sequence: int) -> dict[str, Any]:
    return {
        "SequenceNumber": str(sequence),
        "ApproximateArrivalTimestamp": EPOCH + timedelta(seconds=sequence),
        "Data": b"d%d" % sequence,
        "PartitionKey": "k",
    }


def aggregate(sequence: int, count: int) -> dict[str, Any]:
    aggregator = Aggregator()
    for index in range(count):
        assert aggregator.add(b"a%d.%d" % (sequence, index), f"k{index}")
    built = aggregator.build()
    return {**plain(sequence), "Data": built.data, "PartitionKey": built.partition_key}


class Clock:
    """Time that passes only when the reader sleeps (or a test says so)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept = 0.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += seconds


async def read(shard: FakeShard, start: ShardEntry, end: ShardEntry, **kw: Any) -> list[Any]:
    clock = kw.pop("clock", None) or Clock()
    reader = RangeReader(
        shard,  # type: ignore[arg-type]
        "s",
        "a",
        start,
        end,
        wait_timeout=kw.pop("timeout", 30.0),
        max_bytes_per_second=kw.pop("max_bytes_per_second", None),
        clock=clock,
        sleep=clock.sleep,
    )
    rows = []
    while (batch := await reader.next_batch()) is not None:
        table = batch.to_pydict()
        rows.extend(zip(table["sequence_number"], table["sub_sequence_number"], strict=True))
    return rows


@pytest.mark.anyio
async def test_a_range_starts_and_ends_inside_aggregates_exactly() -> None:
    shard = FakeShard([plain(1), aggregate(2, 4), plain(3), aggregate(4, 3), plain(5)])
    rows = await read(shard, ShardEntry(bound=Bound(2, 1)), ShardEntry(bound=Bound(4, 1)))
    assert rows == [("2", 2), ("2", 3), ("3", 0), ("4", 0), ("4", 1)]
    before = await read(
        shard, ShardEntry(bound=Bound(2, BEFORE)), ShardEntry(bound=Bound(4, BEFORE))
    )
    assert before == [("2", 0), ("2", 1), ("2", 2), ("2", 3), ("3", 0)]
    whole = await read(shard, ShardEntry(), ShardEntry(bound=Bound(5, AFTER)))
    assert len(whole) == 1 + 4 + 1 + 3 + 1


def sized(sequence: int, size: int) -> dict[str, Any]:
    return {**plain(sequence), "Data": b"x" * size}


@pytest.mark.anyio
async def test_max_fetch_rate_paces_a_backlog_at_the_cap_and_without_it_at_five_calls() -> None:
    """``maxFetchRate``: pages of 300 kB under a 100 kB/s cap are 3 s apart (the shard read
    at the cap), and without it 0.2 s apart (the service's 5 calls a second)."""
    records = [sized(n, 100_000) for n in range(1, 13)]  # 4 pages of 3 records
    end = ShardEntry(bound=Bound(12, AFTER))
    capped = Clock()
    rows = await read(FakeShard(records), ShardEntry(), end, clock=capped, max_bytes_per_second=1e5)
    assert len(rows) == 12
    assert capped.now == pytest.approx(3 * 3.0)  # three waits after the first page
    free = Clock()
    await read(FakeShard(records), ShardEntry(), end, clock=free)
    assert free.now == pytest.approx(3 * 0.2)


@pytest.mark.anyio
async def test_a_range_waits_at_the_tip_for_its_end_record_then_stops() -> None:
    shard = FakeShard([plain(n) for n in range(1, 8)], hide=3)
    clock = Clock()
    rows = await read(shard, ShardEntry(), ShardEntry(bound=Bound(6, BEFORE)), clock=clock)
    assert [sequence for sequence, _ in rows] == ["1", "2", "3", "4", "5"]
    assert shard.hide == 0
    assert clock.slept >= 0.05 + 0.1 + 0.2, "it did not back off while waiting"
    assert shard.calls.count("GetRecords") == 3 + 2, shard.calls


@pytest.mark.anyio
async def test_a_range_whose_end_never_shows_up_fails_after_the_timeout() -> None:
    clock = Clock()
    shard = FakeShard([plain(1), plain(2)])

    async def advancing(operation: str, params: dict[str, Any], **options: Any) -> dict[str, Any]:
        clock.now += 1.0
        return await FakeShard.call(shard, operation, params, **options)

    shard.call = advancing  # type: ignore[method-assign]
    with pytest.raises(RangeReadError, match="replayTimeout"):
        await read(
            shard, ShardEntry(), ShardEntry(bound=Bound(9, BEFORE)), timeout=5.0, clock=clock
        )


@pytest.mark.anyio
async def test_a_range_that_does_not_match_the_shard_fails_instead_of_yielding_other_rows() -> None:
    shard = FakeShard([plain(1), plain(3), plain(4)])
    with pytest.raises(RangeReadError, match="does not have"):
        await read(shard, ShardEntry(), ShardEntry(bound=Bound(2, AFTER)))
    with pytest.raises(RangeReadError, match="trimmed"):
        await read(shard, ShardEntry(bound=Bound(2, BEFORE)), ShardEntry(bound=Bound(4, AFTER)))


@pytest.mark.anyio
async def test_a_group_of_ranges_fails_with_its_failing_range_s_own_error_and_ends_the_stream() -> (
    None
):
    shard = FakeShard([plain(1), plain(3)])
    good = ShardRange("s", "a", ShardEntry(), ShardEntry(bound=Bound(3, AFTER)))
    bad = ShardRange("s", "b", ShardEntry(), ShardEntry(bound=Bound(2, BEFORE)))
    send, receive = anyio.create_memory_object_stream[pa.RecordBatch](10)
    with pytest.raises(RangeReadError, match="ends at record 2"):
        await _read_all(shard, [good, bad], send, 1.0)  # type: ignore[arg-type]
    async with receive:
        while True:  # whatever was read before the failure, then the end: no hang
            try:
                receive.receive_nowait()
            except anyio.EndOfStream:
                break


def test_an_offset_equal_to_the_last_one_is_not_parsed_again() -> None:
    """An idle query hands latestOffset the same offset twice a second: parsed once, while a
    changed one, or a bad one, is parsed (and refused) as always."""
    from spark_bridge._options import parse_source_options
    from spark_bridge._source import KinesisStreamReader

    options = parse_source_options(
        {"streamName": "s", "endpointUrl": "http://127.0.0.1:1", "region": "us-east-1"}
    )
    reader = KinesisStreamReader(options)
    offset = Offset(shards={("s", "a"): ShardEntry(bound=Bound(10, AFTER), arrival_ms=5)})
    first = reader._parse(offset.to_json(("s",)))
    again = reader._parse(offset.to_json(("s",)))  # equal, a new document
    assert again is first
    moved = Offset(shards={("s", "a"): ShardEntry(bound=Bound(11, AFTER), arrival_ms=6)})
    assert reader._parse(moved.to_json(("s",))).shards == moved.shards
    with pytest.raises(ConfigError, match="unsupported version"):
        reader._parse({"version": 99})
