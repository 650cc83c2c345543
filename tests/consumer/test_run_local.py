"""``Consumer.run(handler)``: per-shard processors, restarts from the committed position."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from kinesis_actors import KinesisClient, LocalKinesis
from kinesis_actors.consumer import Consumer, ConsumerConfig, RecordBatch, StartingPosition
from kinesis_actors.runtime import SupervisorSnapshot

from .helpers import Row, assert_in_shard_order, by_data, put_plain, rows

pytestmark = pytest.mark.anyio

CONFIG = ConsumerConfig(
    start=StartingPosition.trim_horizon(),
    idle_backoff_initial=0.05,
    idle_backoff_max=0.1,
    max_records_per_call=25,
    restart_intensity=(3, 30.0),
)


@pytest.fixture
async def plain_client(local_kinesis: LocalKinesis) -> AsyncIterator[KinesisClient]:
    async with local_kinesis.client(tls=False) as kinesis:
        yield kinesis


async def _stream(client: KinesisClient, name: str, shards: int, count: int) -> None:
    await client.create_stream(name, shards)
    await put_plain(client, name, [(b"r%04d" % i, f"k{i}") for i in range(count)])


async def test_a_failing_handler_restarts_its_shard_from_the_last_commit(
    plain_client: KinesisClient, stream_name: str
) -> None:
    await _stream(plain_client, stream_name, 2, 200)
    handled: list[Row] = []
    calls: list[tuple[str, str]] = []
    failed: set[str] = set()

    async with Consumer(plain_client, stream_name, CONFIG) as consumer:

        async def handler(batch: RecordBatch) -> None:
            calls.append((batch.shard_id, rows(batch)[0].sequence_number))
            shard_calls = [c for c in calls if c[0] == batch.shard_id]
            if len(shard_calls) == 2 and batch.shard_id not in failed:
                failed.add(batch.shard_id)
                raise RuntimeError("handler failed once")
            handled.extend(rows(batch))
            if len(handled) >= 200:
                consumer.stop()

        supervision: list[tuple[SupervisorSnapshot, ...]] = []

        async def handle_and_look(batch: RecordBatch) -> None:
            await handler(batch)
            if len(handled) >= 200:
                supervision.append(consumer.supervision)

        with anyio.fail_after(30):
            await consumer.run(handle_and_look)
        metrics = consumer.statistics()
    assert failed == {"shardId-000000000000", "shardId-000000000001"}
    # The tree says what happened: each processor restarted once, its mailbox is its shard's
    # buffer (the batch in hand at the crash is its one dead letter: the rewind reads it
    # again), and the readers are sources with no mailbox.
    readers, processors = supervision[0]
    assert (readers.name, processors.name) == ("readers", "processors")
    for shard in failed:
        child = processors.child(f"{stream_name}:{shard}")
        assert child.restarts == 1
        assert child.mailbox is not None
        assert child.mailbox.name == f"{stream_name}/{shard}"
        assert child.mailbox.capacity == CONFIG.prefetch_batches
        assert child.mailbox.dead_letters == 1
        assert readers.child(f"{stream_name}:{shard}").mailbox is None
    assert set(by_data(handled).values()) == {1}
    assert len(handled) == 200
    assert_in_shard_order(handled)
    for shard in failed:
        shard_calls = [c for c in calls if c[0] == shard]
        assert shard_calls[2] == shard_calls[1]  # the failed batch's records came again, first
        assert metrics.shards[(stream_name, shard)].restarts == 1


async def test_a_handler_that_keeps_failing_ends_run(
    plain_client: KinesisClient, stream_name: str
) -> None:
    await _stream(plain_client, stream_name, 1, 10)
    attempts = 0

    async def handler(batch: RecordBatch) -> None:
        nonlocal attempts
        attempts += 1
        raise ValueError("poison")

    async with Consumer(plain_client, stream_name, CONFIG) as consumer:
        with anyio.fail_after(30), pytest.raises(ValueError, match="poison") as caught:
            await consumer.run(handler)
        assert consumer.positions()["streams"][stream_name]["shardId-000000000000"] == {
            "start": {"type": "TRIM_HORIZON"}
        }
    assert attempts == 4  # the first try and 3 restarts
    (note,) = [note for note in caught.value.__notes__ if "gave up" in note]
    # The earlier failures are named with the last one: the causes of the give-up.
    assert note.endswith(
        "3 earlier failure(s) in that window: "
        "ValueError('poison'), ValueError('poison'), ValueError('poison')"
    )


async def test_a_blocked_handler_delays_only_its_shard(
    plain_client: KinesisClient, stream_name: str
) -> None:
    await _stream(plain_client, stream_name, 2, 200)
    listed = await plain_client.call("ListShards", {"StreamName": stream_name})
    slow, fast = (shard["ShardId"] for shard in listed["Shards"])
    release = anyio.Event()
    fast_done = anyio.Event()
    seen: dict[str, int] = {slow: 0, fast: 0}
    expected: dict[str, int] = {}

    async with Consumer(plain_client, stream_name, CONFIG) as consumer:

        async def handler(batch: RecordBatch) -> None:
            if batch.shard_id == slow:
                await release.wait()
            seen[batch.shard_id] += len(batch)
            if batch.shard_id == fast and seen[fast] == expected[fast]:
                fast_done.set()
            if sum(seen.values()) == 200:
                consumer.stop()

        async def watch() -> None:
            await fast_done.wait()
            # The fast shard finished while the slow one's first batch is still in its
            # handler, and the slow shard holds no more than its prefetch meanwhile.
            assert seen[slow] == 0
            metrics = consumer.statistics().shards[(stream_name, slow)]
            assert metrics.buffer_depth <= CONFIG.prefetch_batches
            release.set()

        for shard_id in (slow, fast):
            iterator = await plain_client.call(
                "GetShardIterator",
                {
                    "StreamName": stream_name,
                    "ShardId": shard_id,
                    "ShardIteratorType": "TRIM_HORIZON",
                },
            )
            result = await plain_client.call(
                "GetRecords", {"ShardIterator": iterator["ShardIterator"]}
            )
            expected[shard_id] = len(result["Records"])
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(watch)
                await consumer.run(handler)
    assert seen == expected
