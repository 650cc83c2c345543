"""Issue 19 with Enhanced Fan-Out: never lose an open shard, and starvation is said.

The EFO data path (SubscribeToShard over its own HTTP/2 transport) cannot pass the HTTP/1.1
fault proxy, so faults on it are injected by wrapping ``client.subscribe_to_shard``, as
``test_efo_local.py`` does; the foreign sequence number and the re-created stream need no
injection at all: the real local server answers them.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from kinesis_actors import KinesisClient, errors
from kinesis_actors.client import Subscription
from kinesis_actors.consumer import Consumer, ConsumerConfig, StartingPosition

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
