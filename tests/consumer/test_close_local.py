"""Closing a consumer costs its slowest shard, not the sum of its shards.

Closing an EFO subscription waits for the server to end the connection (``_h2stream``), which
the local server does only when it next writes an event: up to 1 s. Readers used to be
stopped one at a time, so a consumer took about a second per shard to close (measured: 1.9 s
for 2 shards, 3.9 s for 4, 15.6 s for 16, 31 s for 32). They now stop concurrently: about
1 s whatever the number of shards. The bounds here are loose enough for a loaded machine and
far below what one-at-a-time closing takes.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import anyio
import pytest

from kinesis_actors import KinesisClient, LocalKinesis
from kinesis_actors.client import _h2stream
from kinesis_actors.consumer import Consumer, ConsumerConfig, StartingPosition, _efo, _supervision
from kinesis_actors.runtime import StopOrder, stop_bound
from kinesis_actors.runtime._spec import GRACE

pytestmark = pytest.mark.anyio

SHARDS = 16


async def _open_and_read_every_shard(client: KinesisClient, stream: str, mode: str) -> Consumer:
    """A consumer that has read one record from each shard, so every reader is live (in EFO,
    every subscription is open)."""
    await client.create_stream(stream, SHARDS)
    listed = await client.call("ListShards", {"StreamName": stream})
    records = [
        {"Data": shard["ShardId"].encode(), "PartitionKey": "k", "ExplicitHashKey": key}
        for shard in listed["Shards"]
        for key in [shard["HashKeyRange"]["StartingHashKey"]]
    ]
    result = await client.call("PutRecords", {"StreamName": stream, "Records": records})
    assert result["FailedRecordCount"] == 0
    config = ConsumerConfig(mode=mode, start=StartingPosition.trim_horizon())  # type: ignore[arg-type]
    consumer = Consumer(client, stream, config)
    await consumer.__aenter__()
    shards_read: set[str] = set()
    with anyio.fail_after(60):
        async for batch in consumer:
            consumer.commit(batch)
            shards_read.add(batch.shard_id)
            if len(shards_read) == SHARDS:
                break
    return consumer


async def _close_time(consumer: Consumer) -> float:
    started = time.perf_counter()
    await consumer.__aexit__(None, None, None)
    return time.perf_counter() - started


async def test_closing_sixteen_efo_shards_takes_about_as_long_as_one(
    client: KinesisClient, stream_name: str
) -> None:
    consumer = await _open_and_read_every_shard(client, stream_name, "efo")
    elapsed = await _close_time(consumer)
    # One at a time: about 16 s. Concurrently: about 1 s (the server's next event), plus the
    # clean close's deregistration.
    assert elapsed < 4.0, f"closing {SHARDS} EFO shards took {elapsed:.1f} s"
    assert all(shard.subscriptions >= 1 for shard in consumer.statistics().shards.values()), (
        "every shard had a subscription to close"
    )


async def test_closing_sixteen_polling_shards_is_immediate(
    local_kinesis: LocalKinesis, stream_name: str
) -> None:
    async with local_kinesis.client(tls=False) as plain:
        consumer = await _open_and_read_every_shard(plain, stream_name, "polling")
        elapsed = await _close_time(consumer)
    assert elapsed < 1.0, f"closing {SHARDS} polling shards took {elapsed:.1f} s"


def test_every_close_deadline_fits_inside_the_one_around_it() -> None:
    # The client's bound on closing a subscription (private to the client: checked here so a
    # change there is seen here).
    assert _efo.SUBSCRIPTION_CLOSE == _h2stream._CLOSE_TIMEOUT
    assert _efo.DISPOSE_TIMEOUT > _efo.SUBSCRIPTION_CLOSE
    assert _supervision.EFO_CLOSE > _efo.DISPOSE_TIMEOUT
    shard = SimpleNamespace(stream="s", shard_id="shardId-000000000000")
    spec = _supervision.reader_spec(shard, None, None, "efo")  # type: ignore[arg-type]
    assert spec.cleanup_timeout == _supervision.EFO_CLOSE
    # The readers' supervisor stops them concurrently: its bound is one reader's, not 32.
    specs = [spec] * 32
    assert stop_bound(specs, StopOrder.CONCURRENT) == spec.cleanup_timeout + 2 * GRACE
    assert _supervision.shard_supervisor("readers", (3, 5.0)).stop_order is StopOrder.CONCURRENT
