"""EfoReader without a server: scripted subscriptions for what the local server cannot do.

kinesis-mock never ends a closed shard's subscription with a null continuation, so the rule
"a null continuation is terminal" is tested here with a scripted event, as is the rule for
empty events (they advance the position), LATEST pinning and the generation token.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest

from kinesis_actors import errors
from kinesis_actors.consumer import EfoReader, EfoSettings, StartingPosition
from kinesis_actors.consumer._metrics import ShardMetrics
from kinesis_actors.consumer._pacing import PacingSettings, ReadPacer

pytestmark = pytest.mark.anyio

FAST = EfoSettings(
    watchdog_timeout=5.0,
    min_subscribe_interval=0.001,
    backoff_initial=0.001,
    backoff_max=0.002,
    max_consecutive_failures=2,
)


ARRIVED = datetime(2026, 1, 1, tzinfo=UTC)


def record(sequence: str) -> dict[str, Any]:
    return {
        "SequenceNumber": sequence,
        "Data": b"x",
        "PartitionKey": "k",
        "ApproximateArrivalTimestamp": ARRIVED,
    }


#: In a script: the subscription goes silent here (a zombie) until it is closed.
SILENCE = object()


class ScriptedClient:
    """``subscribe_to_shard`` yields scripted subscriptions: each a list of events, where an
    exception instance is raised instead of yielded (the iteration then ends) and ``SILENCE``
    waits for ever; a script that is an exception fails the subscription itself."""

    def __init__(
        self, *scripts: list[Any], listed: bool = True, consumer_exists: bool = True
    ) -> None:
        self.scripts = list(scripts)
        self.listed = listed  # whether ListShards lists the shard
        self.consumer_exists = consumer_exists  # whether DescribeStreamConsumer finds it
        self.calls: list[str] = []
        self.positions: list[Mapping[str, Any]] = []
        self.epoch_timestamps: list[bool] = []  # what each subscription asked for
        self.open = 0
        self.most_open = 0  # subscriptions open at once, at most
        self.silenced = anyio.Event()  # a subscription went silent

    @asynccontextmanager
    async def subscribe_to_shard(
        self,
        arn: str,
        shard_id: str,
        position: Mapping[str, Any],
        *,
        epoch_timestamps: bool = False,
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        self.positions.append(dict(position))
        self.epoch_timestamps.append(epoch_timestamps)
        script = self.scripts.pop(0) if self.scripts else []
        if isinstance(script, BaseException):  # the subscription itself fails
            raise script
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        try:
            yield self._events(script)
        finally:
            self.open -= 1

    async def _events(self, script: list[Any]) -> AsyncIterator[dict[str, Any]]:
        for item in script:
            await anyio.lowlevel.checkpoint()
            if isinstance(item, BaseException):
                raise item
            if item is SILENCE:
                self.silenced.set()
                await anyio.sleep_forever()
            yield item

    async def call(self, operation: str, params: Mapping[str, Any]) -> dict[str, Any]:
        self.calls.append(operation)
        if operation == "DescribeStreamConsumer":
            if not self.consumer_exists:
                raise errors.ResourceNotFoundError("no consumer", code="ResourceNotFoundException")
            return {"ConsumerDescription": {"ConsumerStatus": "ACTIVE"}}
        if operation == "ListShards":
            shards = [{"ShardId": "shardId-000000000000"}] if self.listed else []
            return {"Shards": [*shards, {"ShardId": "shardId-000000000009"}]}
        raise AssertionError(f"unexpected {operation}")


def reader(
    client: ScriptedClient,
    start: StartingPosition | None = None,
    poison: str = "fail",
    *,
    settings: EfoSettings = FAST,
    clock: Callable[[], float] = anyio.current_time,
) -> EfoReader:
    return EfoReader(
        client,  # type: ignore[arg-type]
        "s",
        "shardId-000000000000",
        "arn:consumer",
        start or StartingPosition.trim_horizon(),
        metrics=ShardMetrics(),
        settings=settings,
        poison=poison,
        clock=clock,
    )


async def test_a_null_continuation_is_terminal_and_never_resubscribed() -> None:
    client = ScriptedClient(
        [
            {"Records": [record("5")], "ContinuationSequenceNumber": "5", "MillisBehindLatest": 0},
            {
                "Records": [record("7")],
                "ContinuationSequenceNumber": None,
                "MillisBehindLatest": 0,
                "ChildShards": [{"ShardId": "shardId-000000000001"}],
            },
        ]
    )
    efo = reader(client)
    first = await efo.read()
    assert [r["SequenceNumber"] for r in first.records] == ["5"] and not first.finished
    last = await efo.read()
    assert last.finished and last.child_shards == ("shardId-000000000001",)
    assert [r["SequenceNumber"] for r in last.records] == ["7"]
    assert client.open == 0  # disposed at once
    with pytest.raises(RuntimeError, match="finished"):
        await efo.read()
    assert len(client.positions) == 1


async def test_empty_events_advance_the_position_and_resubscribe_after_it() -> None:
    client = ScriptedClient(
        [
            {"Records": [], "ContinuationSequenceNumber": "10", "MillisBehindLatest": 0},
            {"Records": [], "ContinuationSequenceNumber": "11", "MillisBehindLatest": 0},
        ],
        [{"Records": [record("12")], "ContinuationSequenceNumber": "12", "MillisBehindLatest": 0}],
    )
    efo = reader(client, StartingPosition.latest())
    await efo.read()
    assert efo.start.type == "AT_TIMESTAMP"  # LATEST pinned when the subscription opened
    await efo.read()
    assert efo.position == StartingPosition.after_sequence_number("11")
    read = await efo.read()  # the first subscription ended: a new one from the continuation
    assert [r["SequenceNumber"] for r in read.records] == ["12"]
    assert client.positions[0]["Type"] == "LATEST"
    assert client.positions[1] == {"Type": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": "11"}
    assert client.epoch_timestamps == [True, True]  # arrival times as numbers, for Arrow
    assert efo._metrics.resubscriptions == {"end": 1}
    await efo.aclose()
    assert client.open == 0


async def test_errors_resubscribe_then_give_up_after_too_many_in_a_row() -> None:
    failure = errors.ServiceError("boom", code="InternalFailureException")
    client = ScriptedClient(
        [
            {"Records": [record("1")], "ContinuationSequenceNumber": "1", "MillisBehindLatest": 0},
            failure,
        ],
        [failure],
        [failure],
        [failure],
    )
    efo = reader(client)
    await efo.read()
    with pytest.raises(errors.ServiceError):
        await efo.read()
    assert efo._metrics.resubscriptions == {"error": 3}
    assert all(
        p == {"Type": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": "1"} for p in client.positions[1:]
    )
    assert client.open == 0


async def test_a_reader_that_waited_on_resource_in_use_does_not_give_up_on_the_next_error() -> None:
    """Without a server: more ResourceInUse than the failure limit, then
    a reset, then an event: the reader reads it instead of raising the reset."""
    in_use = errors.ResourceInUseError("held", code="ResourceInUseException")
    reset = errors.TransportError("injected: connection reset")
    event = {"Records": [record("1")], "ContinuationSequenceNumber": "1", "MillisBehindLatest": 0}
    waits = [in_use] * (FAST.max_consecutive_failures + 3)
    client = ScriptedClient(*waits, [reset], [event])  # type: ignore[arg-type]
    efo = reader(client)
    read = await efo.read()
    assert [r["SequenceNumber"] for r in read.records] == ["1"]
    assert efo._metrics.resubscriptions == {"resource_in_use": len(waits), "error": 1}
    await efo.aclose()


async def test_a_stale_generation_cannot_dispose_the_current_subscription() -> None:
    client = ScriptedClient(
        [{"Records": [], "ContinuationSequenceNumber": "1", "MillisBehindLatest": 0}],
        [
            {"Records": [], "ContinuationSequenceNumber": "2", "MillisBehindLatest": 0},
            {"Records": [], "ContinuationSequenceNumber": "3", "MillisBehindLatest": 0},
        ],
    )
    efo = reader(client)
    await efo.read()
    stale = efo.generation
    await efo.read()  # the first subscription ended; the second one is current
    assert efo.generation == stale + 1 and client.open == 1
    await efo._dispose(stale, "error")  # a late callback of the old subscription
    assert client.open == 1 and efo.generation == stale + 1
    await efo.read()
    await efo.aclose()
    assert client.open == 0


NOT_FOUND = errors.ResourceNotFoundError("injected", code="ResourceNotFoundException")


async def test_an_event_without_millis_behind_is_not_the_end_of_the_shard() -> None:
    """A garbled event (no MillisBehindLatest, no continuation) proves nothing: the reader
    resubscribes from where it stood instead of finishing the shard."""
    client = ScriptedClient(
        [{"Records": [record("1")], "ContinuationSequenceNumber": "1", "MillisBehindLatest": 0}],
        [{"Records": []}],
        [{"Records": [record("2")], "ContinuationSequenceNumber": "2", "MillisBehindLatest": 0}],
    )
    efo = reader(client)
    await efo.read()
    read = await efo.read()
    assert not read.finished and [r["SequenceNumber"] for r in read.records] == ["2"]
    assert client.positions[2] == {"Type": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": "1"}
    assert efo._metrics.transient_errors == 1
    await efo.aclose()


async def test_resource_not_found_on_a_listed_shard_resubscribes() -> None:
    client = ScriptedClient(
        NOT_FOUND,  # type: ignore[arg-type]
        [{"Records": [record("3")], "ContinuationSequenceNumber": "3", "MillisBehindLatest": 0}],
    )
    efo = reader(client)
    read = await efo.read()
    assert not read.finished and [r["SequenceNumber"] for r in read.records] == ["3"]
    assert client.calls == ["DescribeStreamConsumer", "ListShards"]
    assert efo._metrics.not_found == 1
    await efo.aclose()


async def test_resource_not_found_on_an_unlisted_shard_is_its_end() -> None:
    client = ScriptedClient(NOT_FOUND, listed=False)  # type: ignore[arg-type]
    read = await reader(client).read()
    assert read.finished and read.records == ()


async def test_a_listed_shard_that_stays_not_found_is_unreadable() -> None:
    client = ScriptedClient(*[NOT_FOUND] * 5)  # type: ignore[arg-type]
    with pytest.raises(errors.ShardUnreadableError) as caught:
        await reader(client, StartingPosition.at_sequence_number("77")).read()
    assert caught.value.shard_id == "shardId-000000000000" and caught.value.stream == "s"
    assert caught.value.position == "AT_SEQUENCE_NUMBER 77"
    assert "77" in str(caught.value) and len(client.positions) == 4  # 1 + 3 retries


def poisoned() -> list[Any]:
    """An event whose record 1 (sequence number 5) has no ``Data``, as the client reports it:
    a MalformedReplyError naming the record, with the rest of the event."""
    return [
        errors.MalformedReplyError(
            "1 malformed record",
            operation="SubscribeToShard",
            bad_records=((1, "5", "no Data"),),
            reply={
                "Records": [record("4"), record("6")],
                "ContinuationSequenceNumber": "6",
                "MillisBehindLatest": 0,
            },
        )
    ]


async def test_a_poison_record_in_an_event_fails_naming_it() -> None:
    with pytest.raises(errors.PoisonRecordError) as caught:
        await reader(ScriptedClient(poisoned())).read()
    error = caught.value
    assert (error.stream, error.shard_id, error.sequence_number, error.index) == (
        "s",
        "shardId-000000000000",
        "5",
        1,
    )


async def test_a_poison_record_in_an_event_is_skipped_and_counted_when_asked() -> None:
    efo = reader(ScriptedClient(poisoned()), poison="skip")
    read = await efo.read()
    assert [r["SequenceNumber"] for r in read.records] == ["4", "6"]
    assert efo._metrics.poison_records == 1
    await efo.aclose()


async def test_invalid_argument_for_a_sequence_number_is_unreadable_at_once() -> None:
    """Real Kinesis refuses a sequence number of another shard with InvalidArgument: that is
    the typed error naming both at once, not five retries and an anonymous restart limit."""
    invalid = errors.ValidationError("bad sequence number", code="InvalidArgumentException")
    client = ScriptedClient(invalid)  # type: ignore[arg-type]
    with pytest.raises(errors.ShardUnreadableError) as caught:
        await reader(client, StartingPosition.at_sequence_number("42")).read()
    assert caught.value.position == "AT_SEQUENCE_NUMBER 42" and len(client.positions) == 1


class PolledClient(ScriptedClient):
    """A ScriptedClient that also answers GetRecords: ``polled`` records once, then none."""

    def __init__(self, *scripts: Any, polled: list[str]) -> None:
        super().__init__(*scripts)
        self.polled = polled
        self.iterators: list[Mapping[str, Any]] = []

    async def call(
        self, operation: str, params: Mapping[str, Any], *, epoch_timestamps: bool = False
    ) -> dict[str, Any]:
        if operation == "GetShardIterator":
            self.iterators.append(dict(params))
            return {"ShardIterator": "it"}
        if operation == "GetRecords":
            self.calls.append(operation)
            records, self.polled = [record(sequence) for sequence in self.polled], []
            return {"Records": records, "NextShardIterator": "it", "MillisBehindLatest": 0}
        return await super().call(operation, params)


async def test_a_held_shard_is_polled_then_subscribed_from_where_polling_reached() -> None:
    """Without a server: refused once, the reader reads by GetRecords
    from its position; its attempts to subscribe meanwhile fail more often than the failure
    limit, which crashes nothing (the shard is read); the first accepted subscription starts
    after the last polled record, and its event ends the polling."""
    in_use = errors.ResourceInUseError("held", code="ResourceInUseException")
    reset = errors.TransportError("injected: connection reset")
    event = {"Records": [record("3")], "ContinuationSequenceNumber": "3", "MillisBehindLatest": 0}
    attempts = [[reset]] * (FAST.max_consecutive_failures + 2)
    client = PolledClient([in_use], *attempts, [event], polled=["1", "2"])
    metrics = ShardMetrics()
    efo = EfoReader(
        client,  # type: ignore[arg-type]
        "s",
        "shardId-000000000000",
        "arn:consumer",
        StartingPosition.after_sequence_number("0"),
        metrics=metrics,
        settings=replace(  # the bound falls before the next attempt: polled at once
            FAST,
            min_subscribe_interval=0.05,
            backoff_initial=0.05,
            backoff_max=0.05,
            fallback_after=0.001,
        ),
        pacer=ReadPacer(PacingSettings(max_calls_per_second=1000, idle_initial=0.001)),
    )
    sequences: list[str] = []
    with anyio.fail_after(10):
        while "3" not in sequences:
            sequences += [r["SequenceNumber"] for r in (await efo.read()).records]
    assert sequences == ["1", "2", "3"]
    assert client.iterators[0]["ShardIteratorType"] == "AFTER_SEQUENCE_NUMBER"
    assert client.iterators[0]["StartingSequenceNumber"] == "0"
    after_polling = {"Type": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": "2"}
    assert client.positions[1:] == [after_polling] * (len(attempts) + 1)
    assert (metrics.fallbacks, metrics.state, metrics.events) == (1, "reading", 1)
    assert metrics.fallback_reads >= 1 and metrics.fallback_seconds > 0
    assert metrics.resubscriptions == {"resource_in_use": 1, "error": len(attempts)}
    await efo.aclose()
