"""EfoReader's recovery in the middle of a subscription, scripted, without a server.

Each test drives one fault that arrives after a subscription has delivered events: the
subscription outliving its lifetime or ended by the server, ResourceInUse, ResourceNotFound,
a garbled event, silence past the watchdog, a connection reset. Each checks where the next
subscription starts (right after the last continuation delivered), that every record arrives
once, and what the fault counts toward giving up. The local server's versions of some of
these (``test_efo_local``) are slow; these run in milliseconds, the watchdog's in a few
tenths of a second.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import anyio
import pytest

from kinesis_actors import errors
from kinesis_actors.consumer import EfoReader, StartingPosition

from .test_efo_reader import FAST, NOT_FOUND, SILENCE, ScriptedClient, reader, record

pytestmark = pytest.mark.anyio

LIMIT = FAST.max_consecutive_failures
IN_USE = errors.ResourceInUseError("injected", code="ResourceInUseException")
RESET = errors.TransportError("injected: connection reset")
#: What the client raises for an event it cannot decode, after the good ones before it.
GARBLED = errors.MalformedReplyError("injected: cannot be framed", operation="SubscribeToShard")
#: The watchdog, short: the tests that wait for it wait this long, nothing else.
WATCHDOG = replace(FAST, watchdog_timeout=0.05)


def event(sequence: str) -> dict[str, Any]:
    """One event with one record, whose continuation is that record's sequence number."""
    return {
        "Records": [record(sequence)],
        "ContinuationSequenceNumber": sequence,
        "MillisBehindLatest": 0,
    }


def after(sequence: str) -> dict[str, Any]:
    """The StartingPosition of a subscription that resumes after ``sequence``."""
    return {"Type": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": sequence}


class Clock:
    """The reader's clock, moved by the test; ``step`` is added at every reading."""

    def __init__(self, step: float = 0.0) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


async def read_all(efo: EfoReader, count: int) -> list[str]:
    """The sequence numbers of the next reads, until ``count`` records (or the shard's end)."""
    sequences: list[str] = []
    with anyio.fail_after(5):
        while len(sequences) < count:
            read = await efo.read()
            sequences += [r["SequenceNumber"] for r in read.records]
            if read.finished:
                break
    return sequences


# -- renewal -----------------------------------------------------------------------------------


async def test_a_subscription_past_its_lifetime_is_renewed_after_its_last_continuation() -> None:
    """The reader closes a subscription at ``subscription_lifetime`` (the service's 5 minutes)
    and opens the next after the last continuation it delivered: the events the old one
    still held are not read from it, and the new one starts at the next record."""
    clock = Clock()
    client = ScriptedClient([event("1"), event("2"), event("3")], [event("3"), event("4")])
    efo = reader(client, settings=replace(FAST, subscription_lifetime=300.0), clock=clock)
    assert await read_all(efo, 1) == ["1"]
    clock.now = 299.0
    assert await read_all(efo, 1) == ["2"]
    clock.now = 300.0
    assert await read_all(efo, 2) == ["3", "4"]
    assert client.positions == [{"Type": "TRIM_HORIZON"}, after("2")]
    assert efo._metrics.resubscriptions == {"renewal": 1}
    assert client.most_open == 1  # the old one was closed before the new one opened
    await efo.aclose()
    assert client.open == 0


async def test_a_subscription_the_server_ends_is_renewed_after_its_last_continuation() -> None:
    client = ScriptedClient([event("1"), event("2")], [event("3")])
    efo = reader(client)
    assert await read_all(efo, 3) == ["1", "2", "3"]
    assert client.positions == [{"Type": "TRIM_HORIZON"}, after("2")]
    assert efo._metrics.resubscriptions == {"end": 1}
    assert efo._metrics.transient_errors == 0
    await efo.aclose()


# -- ResourceInUse -----------------------------------------------------------------------------


async def test_resource_in_use_mid_stream_and_on_resubscribing_is_waited_out() -> None:
    """ResourceInUse ends a subscription, then refuses more resubscriptions than the failure
    limit: the reader waits them out (no error raised) and resumes after the last
    continuation."""
    refusals = LIMIT + 3
    client = ScriptedClient(
        [event("1"), event("2"), IN_USE],
        *[IN_USE] * refusals,  # type: ignore[arg-type]
        [event("3")],
    )
    efo = reader(client)
    assert await read_all(efo, 3) == ["1", "2", "3"]
    assert client.positions[1:] == [after("2")] * (refusals + 1)
    assert efo._metrics.resubscriptions == {"resource_in_use": refusals + 1}
    assert efo._metrics.transient_errors == 0
    await efo.aclose()


async def test_resource_in_use_between_errors_neither_counts_nor_breaks_their_row() -> None:
    """Errors in a row with ResourceInUse between them still add up: the reader gives up on
    the error past the limit, though no event arrived to end the row."""
    client = ScriptedClient(
        [event("1"), RESET],
        *[IN_USE, [RESET]] * LIMIT,  # type: ignore[list-item]
    )
    efo = reader(client)
    assert await read_all(efo, 1) == ["1"]
    with anyio.fail_after(5), pytest.raises(errors.TransportError):
        await efo.read()
    assert efo._metrics.resubscriptions == {"error": LIMIT + 1, "resource_in_use": LIMIT}
    assert client.positions[1:] == [after("1")] * (2 * LIMIT)
    assert client.open == 0


async def test_a_shard_held_by_resource_in_use_mid_stream_is_starved_then_reads_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Past ``starvation_warning`` seconds of ResourceInUse alone, the shard is said to be
    starved, once; its next event makes it a reading shard again."""
    settings = replace(FAST, starvation_warning=5.0, fallback_after=None)
    client = ScriptedClient(
        [event("1"), IN_USE],
        *[IN_USE] * 10,  # type: ignore[arg-type]
        [event("2")],
    )
    efo = reader(client, settings=settings, clock=Clock(step=1.0))
    with caplog.at_level(logging.WARNING, "kinesis_actors.consumer"):
        assert await read_all(efo, 2) == ["1", "2"]
    metrics = efo._metrics
    assert (metrics.starvations, metrics.state) == (1, "reading")
    warnings = [r.getMessage() for r in caplog.records if "met ResourceInUse" in r.getMessage()]
    assert len(warnings) == 1 and "shardId-000000000000" in warnings[0]
    assert "arn:consumer" in warnings[0]
    await efo.aclose()


# -- ResourceNotFound --------------------------------------------------------------------------


async def test_resource_not_found_mid_stream_on_a_listed_shard_resubscribes() -> None:
    client = ScriptedClient([event("1"), NOT_FOUND], [event("2")])
    efo = reader(client)
    assert await read_all(efo, 2) == ["1", "2"]
    assert client.calls == ["DescribeStreamConsumer", "ListShards"]
    assert client.positions == [{"Type": "TRIM_HORIZON"}, after("1")]
    assert efo._metrics.not_found == 1
    await efo.aclose()


async def test_resource_not_found_mid_stream_on_an_unlisted_shard_is_its_end() -> None:
    client = ScriptedClient([event("1"), NOT_FOUND], [event("2")], listed=False)
    efo = reader(client)
    assert await read_all(efo, 2) == ["1"]
    assert len(client.positions) == 1 and client.open == 0  # never resubscribed
    assert efo.position == StartingPosition.after_sequence_number("1")
    with pytest.raises(RuntimeError, match="finished"):
        await efo.read()


async def test_resource_not_found_mid_stream_that_persists_makes_a_listed_shard_unreadable() -> (
    None
):
    """Not found mid-stream, then on each of the policy's retries: the shard is open (listed),
    so it is not finished: a typed error names it and where it was to resume."""
    client = ScriptedClient([event("1"), NOT_FOUND], *[NOT_FOUND] * 3)  # type: ignore[arg-type]
    efo = reader(client)
    assert await read_all(efo, 1) == ["1"]
    with anyio.fail_after(5), pytest.raises(errors.ShardUnreadableError) as caught:
        await efo.read()
    assert caught.value.position == "AFTER_SEQUENCE_NUMBER 1"
    assert client.positions[1:] == [after("1")] * 3
    assert efo.position == StartingPosition.after_sequence_number("1")
    assert client.open == 0


async def test_resource_not_found_mid_stream_separated_by_events_is_retried_every_time() -> None:
    """Each event starts the not-found count over: more not-founds than the policy's retries,
    each after an event, never make the shard unreadable."""
    rounds = 5  # > NotFoundPolicy.retries
    scripts = [[event(str(i)), NOT_FOUND] for i in range(1, rounds + 1)]
    client = ScriptedClient(*scripts, [event(str(rounds + 1))])
    efo = reader(client)
    expected = [str(i) for i in range(1, rounds + 2)]
    assert await read_all(efo, rounds + 1) == expected
    assert client.positions[1:] == [after(str(i)) for i in range(1, rounds + 1)]
    assert efo._metrics.not_found == rounds
    await efo.aclose()


async def test_resource_not_found_mid_stream_for_a_deleted_consumer_fails_naming_it() -> None:
    client = ScriptedClient([event("1"), NOT_FOUND], [event("2")], consumer_exists=False)
    efo = reader(client)
    assert await read_all(efo, 1) == ["1"]
    with pytest.raises(errors.KinesisError, match="consumer arn:consumer no longer exists"):
        await efo.read()
    assert client.calls == ["DescribeStreamConsumer"]  # no shard list: nothing to read
    assert len(client.positions) == 1 and client.open == 0


# -- a garbled event ---------------------------------------------------------------------------


async def test_a_garbled_event_mid_stream_resubscribes_after_the_last_good_one() -> None:
    """The client raises MalformedReplyError after the good events before it: those are
    delivered once, the next subscription starts after the last of them."""
    client = ScriptedClient([event("1"), event("2"), GARBLED], [event("3")])
    efo = reader(client)
    assert await read_all(efo, 3) == ["1", "2", "3"]
    assert client.positions == [{"Type": "TRIM_HORIZON"}, after("2")]
    assert efo._metrics.resubscriptions == {"error": 1}
    assert efo._metrics.transient_errors == 1
    await efo.aclose()


async def test_an_event_without_millis_behind_mid_stream_is_not_delivered_but_read_again() -> None:
    """An event the reader cannot believe (no MillisBehindLatest) is dropped whole, its
    records included, and not taken for a position: the next subscription reads them."""
    unbelievable = {"Records": [record("2")], "ContinuationSequenceNumber": "2"}
    client = ScriptedClient([event("1"), unbelievable], [event("2"), event("3")])
    efo = reader(client)
    assert await read_all(efo, 3) == ["1", "2", "3"]
    assert client.positions == [{"Type": "TRIM_HORIZON"}, after("1")]
    assert efo._metrics.transient_errors == 1
    await efo.aclose()


async def test_garbled_events_on_every_resubscription_give_up_with_the_typed_error() -> None:
    client = ScriptedClient([event("1"), GARBLED], *[[GARBLED]] * LIMIT)
    efo = reader(client)
    assert await read_all(efo, 1) == ["1"]
    with anyio.fail_after(5), pytest.raises(errors.MalformedReplyError) as caught:
        await efo.read()
    assert caught.value.operation == "SubscribeToShard"
    assert client.positions[1:] == [after("1")] * LIMIT
    assert efo.position == StartingPosition.after_sequence_number("1")
    assert client.open == 0


async def test_a_poison_record_mid_stream_is_skipped_and_the_rest_read_once() -> None:
    """The client's contract for a whole event but for one record: MalformedReplyError with
    ``bad_records`` and the event without it. Skipped (``poison="skip"``), the event's other
    records are delivered and its continuation is the next subscription's start."""
    poisoned = errors.MalformedReplyError(
        "injected: one bad record",
        operation="SubscribeToShard",
        bad_records=((1, "3", "Data is not valid base64"),),
        reply={
            "Records": [record("2"), record("4")],
            "ContinuationSequenceNumber": "4",
            "MillisBehindLatest": 0,
        },
    )
    client = ScriptedClient([event("1"), poisoned], [event("5")])
    efo = reader(client, poison="skip")
    assert await read_all(efo, 4) == ["1", "2", "4", "5"]
    assert client.positions == [{"Type": "TRIM_HORIZON"}, after("4")]
    assert efo._metrics.poison_records == 1
    # The subscription ended with the error, not by the server's end of stream.
    assert efo._metrics.resubscriptions == {"error": 1}
    await efo.aclose()


# -- the watchdog ------------------------------------------------------------------------------


async def test_a_subscription_silent_past_the_watchdog_is_replaced_after_its_last_event() -> None:
    client = ScriptedClient([event("1"), SILENCE], [event("2")])
    efo = reader(client, settings=WATCHDOG)
    assert await read_all(efo, 2) == ["1", "2"]
    assert client.silenced.is_set()
    assert client.positions == [{"Type": "TRIM_HORIZON"}, after("1")]
    assert efo._metrics.resubscriptions == {"watchdog": 1}
    assert client.most_open == 1  # the silent one was closed before the next opened
    await efo.aclose()
    assert client.open == 0


async def test_silence_on_every_resubscription_is_retried_without_giving_up() -> None:
    """The watchdog counts and backs off but never crashes the reader: more silent
    subscriptions in a row than the failure limit, then one that delivers."""
    silent = LIMIT + 2
    client = ScriptedClient([event("1"), SILENCE], *[[SILENCE]] * silent, [event("2")])
    efo = reader(client, settings=WATCHDOG)
    assert await read_all(efo, 2) == ["1", "2"]
    assert client.positions[1:] == [after("1")] * (silent + 1)
    assert efo._metrics.resubscriptions == {"watchdog": silent + 1}
    await efo.aclose()


# -- a connection reset ------------------------------------------------------------------------


async def test_a_connection_reset_mid_stream_resubscribes_after_the_last_event() -> None:
    client = ScriptedClient([event("1"), event("2"), RESET], [event("3")])
    efo = reader(client)
    assert await read_all(efo, 3) == ["1", "2", "3"]
    assert client.positions == [{"Type": "TRIM_HORIZON"}, after("2")]
    assert efo._metrics.resubscriptions == {"error": 1}
    assert efo._metrics.transient_errors == 1
    await efo.aclose()


async def test_resets_each_after_an_event_never_add_up_to_giving_up() -> None:
    """An event ends a row of errors: a reset after every event, more often than the failure
    limit, is recovered from every time."""
    rounds = LIMIT + 3
    scripts = [[event(str(i)), RESET] for i in range(1, rounds + 1)]
    client = ScriptedClient(*scripts, [event(str(rounds + 1))])
    efo = reader(client)
    expected = [str(i) for i in range(1, rounds + 2)]
    assert await read_all(efo, rounds + 1) == expected
    assert client.positions[1:] == [after(str(i)) for i in range(1, rounds + 1)]
    assert efo._metrics.resubscriptions == {"error": rounds}
    await efo.aclose()
