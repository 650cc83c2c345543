"""The sans-IO halves of the consumer's hostile-server rules, without a loop or a server:
reply checks, the not-found policy, recovery pacing, poison records."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

import pytest

from kinesis_actors import errors
from kinesis_actors.consumer._discovery import list_shards_page
from kinesis_actors.consumer._identity import stream_identity
from kinesis_actors.consumer._metrics import ShardMetrics
from kinesis_actors.consumer._pacing import PacingSettings, ReadPacer
from kinesis_actors.consumer._poison import screen
from kinesis_actors.consumer._proof import NotFoundPolicy
from kinesis_actors.consumer._replies import (
    get_records_reply,
    shard_iterator,
    subscribe_event,
)

ARRIVED = datetime(2026, 1, 1, tzinfo=UTC)


def record(sequence: Any, **changes: Any) -> dict[str, Any]:
    out = {
        "SequenceNumber": sequence,
        "Data": b"x",
        "PartitionKey": "k",
        "ApproximateArrivalTimestamp": ARRIVED,
    }
    out.update(changes)
    return {key: value for key, value in out.items() if value is not None}


@pytest.mark.parametrize(
    "reply",
    [{}, [], {"Records": []}, {"MillisBehindLatest": 0}, {"Records": {}, "MillisBehindLatest": 0}],
)
def test_a_get_records_reply_missing_its_envelope_is_malformed_not_the_end(
    reply: Any,
) -> None:
    with pytest.raises(errors.MalformedReplyError) as caught:
        get_records_reply(reply)
    assert caught.value.operation == "GetRecords"
    assert isinstance(caught.value, errors.ServiceError)  # retried like a 5xx


def test_only_a_whole_reply_without_a_next_iterator_ends_the_shard() -> None:
    end = get_records_reply(
        {"Records": [], "MillisBehindLatest": 0, "ChildShards": [{"ShardId": "shardId-2"}]}
    )
    assert end.finished and end.child_shards == ("shardId-2",)
    going = get_records_reply({"Records": [], "MillisBehindLatest": 5, "NextShardIterator": "it"})
    assert not going.finished and going.next_iterator == "it"
    with pytest.raises(errors.MalformedReplyError):
        get_records_reply({"Records": [], "MillisBehindLatest": 0, "ChildShards": [{}]})


@pytest.mark.parametrize(
    ("check", "reply", "operation"),
    [
        (shard_iterator, {}, "GetShardIterator"),
        (shard_iterator, {"ShardIterator": ""}, "GetShardIterator"),
        (lambda r: list_shards_page("s", r), {}, "ListShards"),
        (lambda r: list_shards_page("s", r), {"Shards": [{"ParentShardId": "x"}]}, "ListShards"),
        (stream_identity, {}, "DescribeStreamSummary"),
        (subscribe_event, [], "SubscribeToShard"),
        (subscribe_event, {"Records": [], "MillisBehindLatest": "0"}, "SubscribeToShard"),
        (subscribe_event, {"Records": [], "MillisBehindLatest": True}, "SubscribeToShard"),
        (subscribe_event, {"MillisBehindLatest": 0}, "SubscribeToShard"),
        (
            subscribe_event,
            {"Records": [], "MillisBehindLatest": 0, "ContinuationSequenceNumber": 7},
            "SubscribeToShard",
        ),
        (
            stream_identity,
            {"StreamDescriptionSummary": {"StreamARN": "a"}},
            "DescribeStreamSummary",
        ),
    ],
)
def test_other_replies_are_checked_and_name_their_operation(
    check: Any, reply: Any, operation: str
) -> None:
    with pytest.raises(errors.MalformedReplyError) as caught:
        check(reply)
    assert caught.value.operation == operation


def test_an_event_without_a_continuation_is_whole_and_believed() -> None:
    """No continuation is the shard's end, but only in an event that is otherwise whole."""
    end = {"Records": [], "MillisBehindLatest": 0, "ContinuationSequenceNumber": None}
    assert subscribe_event(end) is end
    going = {"Records": [], "MillisBehindLatest": 3, "ContinuationSequenceNumber": "49"}
    assert subscribe_event(going) is going


def test_a_poison_record_fails_by_default_naming_it() -> None:
    records = [record("1"), record("2", Data=None)]
    with pytest.raises(errors.PoisonRecordError) as caught:
        screen(
            "s",
            "shardId-0",
            records,
            [(1, "2", "no Data (bytes)")],
            policy="fail",
            metrics=ShardMetrics(),
            operation="GetRecords",
        )
    error = caught.value
    assert (error.stream, error.shard_id, error.sequence_number, error.index) == (
        "s",
        "shardId-0",
        "2",
        1,
    )
    assert "poison_records='skip'" in str(error)


def test_skipping_keeps_the_rest_counts_and_moves_past_a_trailing_poison_record() -> None:
    records = [record("1"), record("2"), record("3", Data=None)]
    metrics = ShardMetrics()
    kept, last = screen(
        "s",
        "shardId-0",
        records,
        [(2, "3", "no Data (bytes)")],
        policy="skip",
        metrics=metrics,
        operation="GetRecords",
    )
    assert [r["SequenceNumber"] for r in kept] == ["1", "2"]
    assert last == "3" and metrics.poison_records == 1
    # The client's shape: the bad records already removed from the reply.
    kept, last = screen(
        "s",
        "shardId-0",
        records[:2],
        [(2, "3", "bad base64")],
        policy="skip",
        metrics=metrics,
        operation="GetRecords",
        removed=True,
    )
    assert len(kept) == 2 and last == "3" and metrics.poison_records == 2


def test_an_open_shard_gets_a_bounded_number_of_retries() -> None:
    policy = NotFoundPolicy(retries=3)
    assert [policy.open_shard_not_found() for _ in range(4)] == [True, True, True, False]
    policy.read_succeeded()
    assert policy.open_shard_not_found()


def test_expired_iterators_are_renewed_at_most_5_a_second_backing_off() -> None:
    """ExpiredIterator on every GetRecords: simulate the reader's loop for 10 s."""
    pacer = ReadPacer(PacingSettings())
    now, calls = 0.0, []
    while now < 10.0:
        now += pacer.iterator_delay(now)
        pacer.iterator_taken(now)
        calls.append(now)
        now += 0.002  # the GetRecords that expires
        pacer.expired(now)
    gaps = [b - a for a, b in itertools.pairwise(calls)]
    assert all(gap >= 0.2 for gap in gaps)
    assert gaps == sorted(gaps) and gaps[-1] >= 4.9  # backs off up to recovery_max
    assert len(calls) <= 8


def test_a_good_read_resets_the_recovery_backoff() -> None:
    pacer = ReadPacer(PacingSettings())
    for _ in range(5):
        pacer.expired(0.0)
    assert pacer.iterator_delay(0.0) == pytest.approx(3.2)
    pacer.read(10.0, 1, 10)
    pacer.expired(10.0)
    assert pacer.iterator_delay(10.0) == pytest.approx(0.2)
