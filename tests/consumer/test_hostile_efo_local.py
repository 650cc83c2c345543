"""Issue 19 with Enhanced Fan-Out: never lose an open shard, and starvation is said.

The EFO data path (SubscribeToShard over its own HTTP/2 transport) cannot pass the HTTP/1.1
fault proxy, so faults on it are injected by wrapping ``client.subscribe_to_shard``, as
``test_efo_local.py`` does; the foreign sequence number and the re-created stream need no
injection at all: the real local server answers them, and so is a ResourceInUse: the server
answers it to a second subscription of one consumer to one shard (issue 31's test holds one).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import replace
from typing import Any

import anyio
import pytest

from kinesis_actors import KinesisClient, errors
from kinesis_actors.client import Subscription
from kinesis_actors.consumer import (
    Consumer,
    ConsumerConfig,
    StartingPosition,
    register_consumers,
)

from .helpers import consume
from .test_hostile_server_local import RECORDS, check_positions, setup

pytestmark = pytest.mark.anyio


def efo(**options: Any) -> ConsumerConfig:
    return ConsumerConfig(
        mode="efo", start=StartingPosition.trim_horizon(), shard_discovery_interval=0.5, **options
    )


class Refusing:
    """Wraps ``client.subscribe_to_shard``: the first ``times`` subscriptions fail with
    ``error`` (``times=None``: until ``release()``)."""

    def __init__(
        self, client: KinesisClient, error: errors.KinesisError, times: int | None = None
    ) -> None:
        self._real = client.subscribe_to_shard
        self.error, self.times = error, times
        self.refused = 0
        self.released = False

    def release(self) -> None:
        self.released = True

    @asynccontextmanager
    async def __call__(
        self, arn: str, shard_id: str, position: Mapping[str, Any]
    ) -> AsyncIterator[Subscription]:
        if not self.released and (self.times is None or self.refused < self.times):
            self.refused += 1
            raise self.error
        async with self._real(arn, shard_id, position) as subscription:
            yield subscription


async def test_lesson_30_efo_one_resource_not_found_on_subscribe_does_not_end_the_shard(
    client: KinesisClient, stream_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = await setup(client, stream_name)
    refusing = Refusing(client, errors.ResourceNotFoundError("injected"), times=1)
    monkeypatch.setattr(client, "subscribe_to_shard", refusing)
    async with Consumer(client, stream_name, efo()) as consumer:
        with anyio.fail_after(60):
            seen = await consume(consumer, len(expected))
        positions, metrics = consumer.positions(), consumer.metrics
    assert sorted(row.data for row in seen) == expected
    check_positions(positions, stream_name, seen)
    assert refusing.refused == 1
    assert sum(shard["not_found"] for shard in metrics["shards"].values()) == 1


async def test_lesson_31_efo_a_foreign_sequence_number_is_a_typed_error_naming_both(
    client: KinesisClient, stream_name: str
) -> None:
    await setup(client, stream_name)
    async with Consumer(client, stream_name, efo()) as consumer:
        with anyio.fail_after(60):
            await consume(consumer, RECORDS)
        saved = consumer.positions()
    shards = saved["streams"][stream_name]
    first, second = sorted(shards)
    foreign = shards[second]["sequence_number"]
    shards[first] = dict(shards[second])
    async with Consumer(client, stream_name, efo(positions=saved)) as consumer:
        with anyio.fail_after(60), pytest.raises(errors.ShardUnreadableError) as caught:
            await consume(consumer, 1)
        after = consumer.positions()["streams"][stream_name]
    assert (caught.value.stream, caught.value.shard_id) == (stream_name, first)
    assert foreign in str(caught.value)
    assert after[first] == {"sequence_number": foreign, "sub_sequence_number": 0}


async def test_lesson_31_efo_positions_of_a_re_created_stream_are_refused(
    client: KinesisClient, stream_name: str
) -> None:
    await setup(client, stream_name, count=2)
    async with Consumer(client, stream_name, efo()) as consumer:
        with anyio.fail_after(60):
            await consume(consumer, 2)
        saved = consumer.positions()
    await client.delete_stream(stream_name)
    await setup(client, stream_name, count=2)
    with pytest.raises(errors.PositionsMismatchError, match="created again"):
        async with Consumer(client, stream_name, efo(positions=saved)):
            pass


async def test_lesson_6_a_shard_that_only_meets_resource_in_use_is_said_to_be_starved(
    client: KinesisClient,
    stream_name: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 19 item 14: before, such a consumer delivered nothing, logged nothing, and its
    state stayed "reading". Now, after ``efo_starvation_warning``: a warning naming the shard
    and the consumer, state ``starved``; once the shard is free, every record arrives."""
    await client.create_stream(stream_name, 1)
    expected = [b"r%02d" % i for i in range(5)]
    records = [{"Data": item, "PartitionKey": "k"} for item in expected]
    await client.call("PutRecords", {"StreamName": stream_name, "Records": records})
    refusing = Refusing(client, errors.ResourceInUseError("injected"))
    monkeypatch.setattr(client, "subscribe_to_shard", refusing)
    key = f"{stream_name}/shardId-000000000000"
    with caplog.at_level(logging.WARNING, "kinesis_actors.consumer"):
        async with Consumer(client, stream_name, efo(efo_starvation_warning=1.0)) as consumer:
            with anyio.fail_after(30):
                while consumer.metrics["shards"][key]["state"] != "starved":
                    await anyio.sleep(0.05)
            starved = consumer.metrics["shards"][key]
            refusing.release()
            with anyio.fail_after(60):
                seen = await consume(consumer, len(expected))
            after = consumer.metrics["shards"][key]
    assert starved["starvations"] == 1 and starved["events"] == 0
    assert starved["resubscriptions"]["resource_in_use"] >= 2
    warning = next(r.getMessage() for r in caplog.records if "another reader" in r.getMessage())
    assert "shardId-000000000000" in warning
    assert consumer.consumer_arns[stream_name] in warning
    assert [row.data for row in seen] == expected
    assert after["state"] == "reading" and after["starvations"] == 1


class ResetAfterWaits:
    """Wraps ``client.subscribe_to_shard``: counts the server's ResourceInUse answers (``waited``
    is set after ``waits`` of them), then, once ``released``, resets the next subscription
    before it reaches the server, as a dropped connection does."""

    def __init__(self, client: KinesisClient, waits: int) -> None:
        self._real = client.subscribe_to_shard
        self.waits = waits
        self.in_use = 0
        self.waited = anyio.Event()
        self.released = False
        self.resets = 0

    @asynccontextmanager
    async def __call__(
        self, arn: str, shard_id: str, position: Mapping[str, Any]
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        if self.released and not self.resets:
            self.resets += 1
            raise errors.TransportError("injected: connection reset")
        async with self._real(arn, shard_id, position) as subscription:
            yield self._events(subscription)

    async def _events(self, subscription: Subscription) -> AsyncIterator[dict[str, Any]]:
        try:
            async for event in subscription:
                yield event
        except errors.ResourceInUseError:  # the server's answer, as the stream's first event
            self.in_use += 1
            if self.in_use >= self.waits:
                self.waited.set()
            raise


async def test_a_reader_that_waited_on_resource_in_use_survives_the_next_reset(
    client: KinesisClient,
    stream_name: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 31, finding 2: the waits counted as consecutive failures, so the first reset
    after a long ResourceInUse took the reader past ``max_consecutive_failures``: it crashed
    with an ERROR and a traceback. Here another subscription of the same consumer really
    holds the shard (the server answers ResourceInUse) for more waits than that limit; then
    it lets go, and the reader's next subscription is reset. The reader reads on: no crash,
    no ERROR, every record.

    The service's pacing (1 s between subscriptions, waits backed off up to 10 s) is
    shortened to hundredths, so the waits take a second, not a minute; the limit is not."""
    await client.create_stream(stream_name, 1)
    expected = [b"w%02d" % i for i in range(5)]
    records = [{"Data": item, "PartitionKey": "k"} for item in expected]
    await client.call("PutRecords", {"StreamName": stream_name, "Records": records})
    with anyio.fail_after(30):
        arns = await register_consumers(client, stream_name, "held")
    shard = "shardId-000000000000"
    async with AsyncExitStack() as holding:
        rival = await holding.enter_async_context(
            client.subscribe_to_shard(arns[stream_name], shard, {"Type": "LATEST"})
        )
        with anyio.fail_after(10):
            await aiter(rival).__anext__()  # the server holds the shard for it now
        config = efo(registration="none", consumer_arns=arns)
        consumer = Consumer(client, stream_name, config)
        limit = consumer._efo.max_consecutive_failures
        consumer._efo = replace(  # the pacing only, see the docstring
            consumer._efo, min_subscribe_interval=0.02, backoff_initial=0.02, backoff_max=0.1
        )
        faults = ResetAfterWaits(client, waits=limit + 2)
        monkeypatch.setattr(client, "subscribe_to_shard", faults)
        with caplog.at_level(logging.WARNING, "kinesis_actors"):
            async with consumer:
                with anyio.fail_after(30):
                    await faults.waited.wait()
                faults.released = True  # the next subscription is reset...
                await holding.aclose()  # ...and the shard is let go
                with anyio.fail_after(60):
                    seen = await consume(consumer, len(expected))
                metrics = consumer.metrics["shards"][f"{stream_name}/{shard}"]
                [readers] = consumer.supervision
    assert [row.data for row in seen] == expected
    assert faults.in_use > limit and faults.resets == 1
    assert metrics["resubscriptions"]["resource_in_use"] >= faults.in_use
    assert metrics["resubscriptions"]["error"] == 1 and metrics["transient_errors"] == 1
    assert readers.child(f"{stream_name}:{shard}").restarts == 0
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
